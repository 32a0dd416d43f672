// bfloat16 rounding shared by the CUDA path and its CPU emulation (the "plain bf16 computation"
// that SPEC §10's tolerance rule compares against). Round to nearest, ties to even; NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/hd.hpp"

namespace dflash {

DFLASH_HD inline std::uint16_t bf16_bits_from_float(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const std::uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7FFFu + lsb;  // may carry into the exponent: that is the correct rounding (to inf too)
  return static_cast<std::uint16_t>(bits >> 16);
}

DFLASH_HD inline float float_from_bf16_bits(std::uint16_t bits16) {
  const std::uint32_t bits = static_cast<std::uint32_t>(bits16) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

DFLASH_HD inline float round_to_bf16(float value) { return float_from_bf16_bits(bf16_bits_from_float(value)); }

}  // namespace dflash
