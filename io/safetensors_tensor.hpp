// One tensor of a safetensors file: what the header says about it (TensorInfo) and, once read,
// its bytes (TensorData), with the conversions to double and int64 that callers compute with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors_dtype.hpp"

namespace dflash::safetensors {

// Dimensions, outermost first (C order). Same type as dflash::Shape in reference/tensor.hpp.
using Shape = std::vector<std::int64_t>;

// "[2, 3]"; "[]" for a scalar.
std::string format_shape(const Shape& shape);

// The number of elements of `shape`, or nothing if a dimension is negative or the number of
// bytes (elements × element_size) does not fit in 64 bits.
std::optional<std::uint64_t> checked_element_count(const Shape& shape, std::size_t element_size);

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F64;
  Shape shape;
  std::uint64_t begin = 0;  // data_offsets: byte range [begin, end) within the data section
  std::uint64_t end = 0;

  std::uint64_t byte_size() const { return end - begin; }
  // Elements in the tensor (= byte_size / dtype_size for a validated header).
  std::uint64_t element_count() const { return byte_size() / dtype_size(dtype); }
};

struct TensorData {
  std::string source;  // the file (or buffer name) it came from, for error messages
  TensorInfo info;
  std::vector<std::byte> bytes;  // little-endian elements in C order; size == info.byte_size()
};

// Every element as a double. Exact for F64, F32, BF16, F16, I32, U8 and BOOL. Throws
// dflash::InputError for an I64 element beyond ±2^53 (not exactly representable) and for a BOOL
// byte other than 0 or 1.
std::vector<double> to_doubles(const TensorData& tensor);

// Every element as an int64. Integer dtypes only (I64, I32, U8, BOOL); a float tensor, or a BOOL
// byte other than 0 or 1, throws dflash::InputError.
std::vector<std::int64_t> to_int64s(const TensorData& tensor);

}  // namespace dflash::safetensors
