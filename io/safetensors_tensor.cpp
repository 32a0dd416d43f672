#include "io/safetensors_tensor.hpp"

#include <limits>

#include "io/errors.hpp"
#include "io/strict_json.hpp"

namespace dflash::safetensors {

namespace {

// 2^53: every integer of smaller magnitude is a double, 2^53 + 1 is not.
constexpr std::int64_t kLargestExactDoubleInteger = std::int64_t{1} << 53;

// Bytes and header must agree before any element is read: a TensorData built by hand (not by a
// reader) could be inconsistent, and reading past `bytes` must never happen.
void check_byte_count(const TensorData& tensor) {
  const TensorInfo& info = tensor.info;
  const auto count = checked_element_count(info.shape, dtype_size(info.dtype));
  if (!count || info.end < info.begin || info.byte_size() != tensor.bytes.size() ||
      *count * dtype_size(info.dtype) != tensor.bytes.size()) {
    throw InputError(str(tensor.source, ": tensor ", clipped_quote(info.name), " holds ", tensor.bytes.size(),
                         " bytes but dtype ", dtype_name(info.dtype), " × shape ", format_shape(info.shape),
                         " does not match"));
  }
}

std::int64_t checked_bool(const TensorData& tensor, std::size_t index, std::int64_t byte) {
  if (byte != 0 && byte != 1) {
    throw InputError(str(tensor.source, ": tensor ", clipped_quote(tensor.info.name), " BOOL element ", index,
                         " is byte ", byte, ", not 0 or 1"));
  }
  return byte;
}

}  // namespace

std::string format_shape(const Shape& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::optional<std::uint64_t> checked_element_count(const Shape& shape, std::size_t element_size) {
  std::uint64_t count = 1;
  for (std::int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(dim), &count)) return std::nullopt;
  }
  std::uint64_t bytes;
  if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(element_size), &bytes)) return std::nullopt;
  return count;
}

std::vector<double> to_doubles(const TensorData& tensor) {
  check_byte_count(tensor);
  const Dtype dtype = tensor.info.dtype;
  const std::size_t size = dtype_size(dtype);
  const std::size_t count = tensor.bytes.size() / size;
  std::vector<double> values(count);
  if (dtype_is_float(dtype)) {
    load_float_elements(dtype, tensor.bytes.data(), count, values.data());
    return values;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const std::byte* element = tensor.bytes.data() + i * size;
    std::int64_t integer = load_integer_element(dtype, element);
    if (dtype == Dtype::BOOL) integer = checked_bool(tensor, i, integer);
    if (integer > kLargestExactDoubleInteger || integer < -kLargestExactDoubleInteger) {
      throw InputError(str(tensor.source, ": tensor ", clipped_quote(tensor.info.name), " element ", i, " = ", integer,
                           " is not exactly representable as a double"));
    }
    values[i] = static_cast<double>(integer);
  }
  return values;
}

std::vector<std::int64_t> to_int64s(const TensorData& tensor) {
  const Dtype dtype = tensor.info.dtype;
  if (!dtype_is_integer(dtype)) {
    throw InputError(str(tensor.source, ": tensor ", clipped_quote(tensor.info.name), " has float dtype ",
                         dtype_name(dtype), ", not an integer dtype"));
  }
  check_byte_count(tensor);
  const std::size_t size = dtype_size(dtype);
  const std::size_t count = tensor.bytes.size() / size;
  std::vector<std::int64_t> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = load_integer_element(dtype, tensor.bytes.data() + i * size);
    if (dtype == Dtype::BOOL) checked_bool(tensor, i, values[i]);
  }
  return values;
}

}  // namespace dflash::safetensors
