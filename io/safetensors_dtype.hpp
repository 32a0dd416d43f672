// The element types a safetensors file may hold here, and the conversion of one element between
// its little-endian bytes and a double (floats) or an int64 (integers).
//
// Only the eight dtypes the project uses are supported (F64, F32, BF16, F16, I64, I32, U8, BOOL);
// a file with any other dtype name is rejected rather than half-understood.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dflash::safetensors {

enum class Dtype : std::uint8_t { F64, F32, BF16, F16, I64, I32, U8, BOOL };

// The name used in the JSON header ("F64", "BF16", ...).
std::string_view dtype_name(Dtype dtype);

// The dtype a header name denotes, or nothing if the name is not one of the eight.
std::optional<Dtype> dtype_from_name(std::string_view name);

// Bytes per element.
std::size_t dtype_size(Dtype dtype);

bool dtype_is_float(Dtype dtype);    // F64, F32, BF16, F16
bool dtype_is_integer(Dtype dtype);  // I64, I32, U8, BOOL

// "F64, F32, BF16, F16, I64, I32, U8, BOOL", for error messages.
std::string_view supported_dtype_names();

// ---- Float elements --------------------------------------------------------------------------

// IEEE binary16 bits -> double. Exact: every half value is a double.
double double_from_f16_bits(std::uint16_t bits);

// double -> IEEE binary16 bits, rounded once to nearest, ties to even (overflow gives inf, NaN
// stays NaN with its sign).
std::uint16_t f16_bits_from_double(double value);

// double -> bfloat16 bits, rounded once to nearest, ties to even. Uses the project's shared
// float -> bf16 rounding (common/bf16.hpp) on a round-to-odd float, which avoids the double
// rounding that a plain double -> float -> bf16 chain would commit.
std::uint16_t bf16_bits_from_double(double value);

// The float nearest to `value` in the round-to-odd sense: truncate toward zero and, if that lost
// anything, set the last mantissa bit. Rounding this float to any format at least two bits
// narrower than float gives the same result as rounding `value` directly.
float float_rounded_to_odd(double value);

// ---- Little-endian element storage -----------------------------------------------------------

// Writes the element `value` of a float dtype into dtype_size(dtype) bytes at `out`.
void store_float_element(Dtype dtype, double value, std::byte* out);

// Reads the element of a float dtype at `in`. Exact for every float dtype.
double load_float_element(Dtype dtype, const std::byte* in);

// Reads `count` consecutive elements of a float dtype from `in` into out[0, count): what
// load_float_element gives for each, bit for bit, with the dtype's switch outside the loop (the
// readers of feature shards and weights convert 10^8 to 10^9 values at full scale).
void load_float_elements(Dtype dtype, const std::byte* in, std::size_t count, double* out);

// Writes `count` values as consecutive elements of a float dtype to out[0, count x size): what
// store_float_element writes for each, bit for bit, with the dtype's switch outside the loop (a
// checkpoint encodes 5.2e9 values at full scale: an element at a time, 6 ns each, was 31 s). From
// doubles, or from floats (a device backend's fp32 values, each exactly a double). One exception:
// a signaling NaN float written as F32 keeps its bits here, where the element path, through a
// double, quiets it (no finite value or infinity is affected; checkpoints and exports hold none).
void store_float_elements(Dtype dtype, const double* in, std::size_t count, std::byte* out);
void store_float_elements(Dtype dtype, const float* in, std::size_t count, std::byte* out);

// Writes the element `value` of an integer dtype. The caller has checked the range
// (integer_fits_dtype).
void store_integer_element(Dtype dtype, std::int64_t value, std::byte* out);

// Reads the element of an integer dtype at `in`. A BOOL byte is returned as is (0..255); the
// caller decides whether anything other than 0 and 1 is an error.
std::int64_t load_integer_element(Dtype dtype, const std::byte* in);

// Whether `value` is representable in the integer dtype (BOOL: 0 or 1).
bool integer_fits_dtype(Dtype dtype, std::int64_t value);

// ---- Little-endian words ---------------------------------------------------------------------

std::uint64_t load_le_u64(const std::byte* in);
void store_le_u64(std::uint64_t value, std::byte* out);

}  // namespace dflash::safetensors
