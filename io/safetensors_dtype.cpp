#include "io/safetensors_dtype.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "common/bf16.hpp"

namespace dflash::safetensors {

namespace {

struct DtypeFacts {
  Dtype dtype;
  std::string_view name;
  std::size_t size;
  bool is_float;
};

constexpr std::array<DtypeFacts, 8> kDtypes = {{
    {Dtype::F64, "F64", 8, true},
    {Dtype::F32, "F32", 4, true},
    {Dtype::BF16, "BF16", 2, true},
    {Dtype::F16, "F16", 2, true},
    {Dtype::I64, "I64", 8, false},
    {Dtype::I32, "I32", 4, false},
    {Dtype::U8, "U8", 1, false},
    {Dtype::BOOL, "BOOL", 1, false},
}};

const DtypeFacts& facts(Dtype dtype) { return kDtypes[static_cast<std::size_t>(dtype)]; }

// Unsigned little-endian words of 1, 2, 4 or 8 bytes, assembled byte by byte so that the file
// format does not depend on the host's byte order.
std::uint64_t load_le(const std::byte* in, std::size_t bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes; ++i) value |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return value;
}

void store_le(std::uint64_t value, std::size_t bytes, std::byte* out) {
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFFu);
}

}  // namespace

static_assert(kDtypes[static_cast<std::size_t>(Dtype::BOOL)].dtype == Dtype::BOOL, "table order");

std::string_view dtype_name(Dtype dtype) { return facts(dtype).name; }

std::optional<Dtype> dtype_from_name(std::string_view name) {
  for (const DtypeFacts& f : kDtypes) {
    if (f.name == name) return f.dtype;
  }
  return std::nullopt;
}

std::size_t dtype_size(Dtype dtype) { return facts(dtype).size; }

bool dtype_is_float(Dtype dtype) { return facts(dtype).is_float; }

bool dtype_is_integer(Dtype dtype) { return !facts(dtype).is_float; }

std::string_view supported_dtype_names() { return "F64, F32, BF16, F16, I64, I32, U8, BOOL"; }

double double_from_f16_bits(std::uint16_t bits) {
  const bool negative = (bits & 0x8000u) != 0;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), -24);  // zero or subnormal
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else {
    magnitude = std::ldexp(static_cast<double>(1024 + mantissa), exponent - 25);
  }
  return negative ? -magnitude : magnitude;
}

std::uint16_t f16_bits_from_double(double value) {
  const std::uint16_t sign = std::signbit(value) ? 0x8000u : 0u;
  if (std::isnan(value)) return static_cast<std::uint16_t>(sign | 0x7E00u);
  const double magnitude = std::fabs(value);
  // 65520 is halfway between the largest half (65504, odd mantissa) and 65536: ties go to the
  // even neighbour, which is the overflow to infinity.
  if (magnitude >= 65520.0) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (magnitude < 0x1p-14) {
    // Subnormal range: the grid is multiples of 2^-24. Scaling by a power of two is exact, so
    // nearbyint (round to nearest, ties to even, the default mode) is the only rounding. A result
    // of 1024 is the smallest normal, whose bits are exactly 0x0400.
    const double units = std::nearbyint(magnitude * 0x1p24);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(units));
  }
  int binary_exponent;
  std::frexp(magnitude, &binary_exponent);  // magnitude = f * 2^binary_exponent, f in [0.5, 1)
  const int unbiased = binary_exponent - 1;
  // The 11 significant bits as an integer in [1024, 2048]; 2048 carries into the exponent, which
  // the addition below does by itself.
  const double significand = std::nearbyint(std::ldexp(magnitude, 10 - unbiased));
  const unsigned bits = (static_cast<unsigned>(unbiased + 15) << 10) + (static_cast<unsigned>(significand) - 1024u);
  return static_cast<std::uint16_t>(sign | bits);
}

float float_rounded_to_odd(double value) {
  if (std::isnan(value)) {
    return std::copysign(std::numeric_limits<float>::quiet_NaN(), std::signbit(value) ? -1.0f : 1.0f);
  }
  const float nearest = static_cast<float>(value);
  if (static_cast<double>(nearest) == value) return nearest;  // exact (also +-inf and +-0)
  // Truncate toward zero: if rounding went away from zero, step back one float. A float's bits are
  // its sign and its magnitude's, which are ordered as the magnitudes are: one less is the next
  // float toward zero (nextafter(nearest, 0)), for subnormals and from infinity (to the largest
  // float) too. nearest is not 0 here: rounding never goes away from zero to 0.
  std::uint32_t bits = std::bit_cast<std::uint32_t>(nearest);
  if (std::fabs(static_cast<double>(nearest)) > std::fabs(value)) bits -= 1u;
  bits |= 1u;  // sticky bit: "something was lost"
  return std::bit_cast<float>(bits);
}

std::uint16_t bf16_bits_from_double(double value) { return bf16_bits_from_float(float_rounded_to_odd(value)); }

void store_float_element(Dtype dtype, double value, std::byte* out) {
  switch (dtype) {
    case Dtype::F64:
      store_le(std::bit_cast<std::uint64_t>(value), 8, out);
      return;
    case Dtype::F32:
      store_le(std::bit_cast<std::uint32_t>(static_cast<float>(value)), 4, out);
      return;
    case Dtype::BF16:
      store_le(bf16_bits_from_double(value), 2, out);
      return;
    case Dtype::F16:
      store_le(f16_bits_from_double(value), 2, out);
      return;
    default:
      break;
  }
  // Callers check dtype_is_float first; reaching here is a programming error.
  throw std::logic_error("store_float_element: not a float dtype");
}

double load_float_element(Dtype dtype, const std::byte* in) {
  switch (dtype) {
    case Dtype::F64:
      return std::bit_cast<double>(load_le(in, 8));
    case Dtype::F32:
      return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(load_le(in, 4))));
    case Dtype::BF16:
      return static_cast<double>(float_from_bf16_bits(static_cast<std::uint16_t>(load_le(in, 2))));
    case Dtype::F16:
      return double_from_f16_bits(static_cast<std::uint16_t>(load_le(in, 2)));
    default:
      break;
  }
  throw std::logic_error("load_float_element: not a float dtype");
}

namespace {

// load_le of a width known at compile time: the same bytes in the same order, but a loop the
// compiler can turn into one load per element and vectorise (load_le's width is a run-time value).
template <std::size_t Bytes>
std::uint64_t load_le_fixed(const std::byte* in) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < Bytes; ++i) value |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return value;
}

// store_le with the width a constant: one store per element, as load_le_fixed.
template <std::size_t Bytes>
void store_le_fixed(std::uint64_t value, std::byte* out) {
  for (std::size_t i = 0; i < Bytes; ++i) out[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFFu);
}

// store_float_element's conversions, each on the value as a double, in loops the compiler keeps
// apart by dtype.
template <class T>
void store_float_run(Dtype dtype, const T* in, std::size_t count, std::byte* out) {
  switch (dtype) {
    case Dtype::F64:
      for (std::size_t i = 0; i < count; ++i)
        store_le_fixed<8>(std::bit_cast<std::uint64_t>(static_cast<double>(in[i])), out + 8 * i);
      return;
    case Dtype::F32:
      // From a float the value is its own bits (the double round trip is exact; the compiler may
      // drop it, so a signaling NaN is not quieted: the header says so).
      for (std::size_t i = 0; i < count; ++i)
        store_le_fixed<4>(std::bit_cast<std::uint32_t>(static_cast<float>(in[i])), out + 4 * i);
      return;
    case Dtype::BF16:
      for (std::size_t i = 0; i < count; ++i)
        store_le_fixed<2>(bf16_bits_from_double(static_cast<double>(in[i])), out + 2 * i);
      return;
    case Dtype::F16:
      for (std::size_t i = 0; i < count; ++i)
        store_le_fixed<2>(f16_bits_from_double(static_cast<double>(in[i])), out + 2 * i);
      return;
    default:
      break;
  }
  throw std::logic_error("store_float_elements: not a float dtype");
}

}  // namespace

void store_float_elements(Dtype dtype, const double* in, std::size_t count, std::byte* out) {
  store_float_run(dtype, in, count, out);
}

void store_float_elements(Dtype dtype, const float* in, std::size_t count, std::byte* out) {
  store_float_run(dtype, in, count, out);
}

void load_float_elements(Dtype dtype, const std::byte* in, std::size_t count, double* out) {
  switch (dtype) {
    case Dtype::F64:
      for (std::size_t i = 0; i < count; ++i) out[i] = std::bit_cast<double>(load_le_fixed<8>(in + 8 * i));
      return;
    case Dtype::F32:
      for (std::size_t i = 0; i < count; ++i) {
        out[i] = static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(load_le_fixed<4>(in + 4 * i))));
      }
      return;
    case Dtype::BF16:
      for (std::size_t i = 0; i < count; ++i) {
        out[i] = static_cast<double>(float_from_bf16_bits(static_cast<std::uint16_t>(load_le_fixed<2>(in + 2 * i))));
      }
      return;
    case Dtype::F16:
      for (std::size_t i = 0; i < count; ++i) {
        out[i] = double_from_f16_bits(static_cast<std::uint16_t>(load_le_fixed<2>(in + 2 * i)));
      }
      return;
    default:
      break;
  }
  throw std::logic_error("load_float_elements: not a float dtype");
}

void store_integer_element(Dtype dtype, std::int64_t value, std::byte* out) {
  if (!dtype_is_integer(dtype)) throw std::logic_error("store_integer_element: not an integer dtype");
  // Two's complement truncation to the element width; the range was checked by the caller.
  store_le(static_cast<std::uint64_t>(value), dtype_size(dtype), out);
}

std::int64_t load_integer_element(Dtype dtype, const std::byte* in) {
  switch (dtype) {
    case Dtype::I64:
      return static_cast<std::int64_t>(load_le(in, 8));
    case Dtype::I32:
      return static_cast<std::int32_t>(static_cast<std::uint32_t>(load_le(in, 4)));
    case Dtype::U8:
    case Dtype::BOOL:
      return static_cast<std::int64_t>(load_le(in, 1));
    default:
      break;
  }
  throw std::logic_error("load_integer_element: not an integer dtype");
}

bool integer_fits_dtype(Dtype dtype, std::int64_t value) {
  switch (dtype) {
    case Dtype::I64:
      return true;
    case Dtype::I32:
      return value >= std::numeric_limits<std::int32_t>::min() && value <= std::numeric_limits<std::int32_t>::max();
    case Dtype::U8:
      return value >= 0 && value <= 255;
    case Dtype::BOOL:
      return value == 0 || value == 1;
    default:
      return false;
  }
}

std::uint64_t load_le_u64(const std::byte* in) { return load_le(in, 8); }

void store_le_u64(std::uint64_t value, std::byte* out) { store_le(value, 8, out); }

}  // namespace dflash::safetensors
