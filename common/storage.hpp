// How a kernel reads and writes a tensor element whatever its storage: fp32 as is, bf16 as its
// raw bits (common/bf16.hpp: round to nearest even going in, exact widening coming out). All
// arithmetic is fp32; the CPU tests run the kernels' programs on fp32 storage (to hold them to
// the fp32 rule), the GPU on bf16.
#pragma once

#include <cstdint>

#include "common/bf16.hpp"
#include "common/hd.hpp"

namespace dflash {

DFLASH_HD inline float widen(float value) { return value; }
DFLASH_HD inline float widen(std::uint16_t bf16_bits) { return float_from_bf16_bits(bf16_bits); }

DFLASH_HD inline void narrow_into(float value, float& out) { out = value; }
DFLASH_HD inline void narrow_into(float value, std::uint16_t& bf16_bits) { bf16_bits = bf16_bits_from_float(value); }

}  // namespace dflash
