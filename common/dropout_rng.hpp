// The coordinates of every random draw in a training step (SPEC §4, §6). A draw is a pure
// function of (seed, step, stream, element): nothing is stored, everything can be regenerated.
#pragma once

#include <cstdint>

#include "common/hd.hpp"
#include "common/philox.hpp"

namespace dflash {

enum class DropoutSite : std::uint32_t { attention_probs = 1, attention_residual = 2, mlp_residual = 3 };

inline constexpr std::uint32_t kAnchorSamplerLayer = 0xFF;  // layer id reserved for the sampler
inline constexpr std::uint32_t kMaxSequenceIndex = 1u << 20;

// stream(seq, layer, site) = seq<<12 | layer<<4 | site; seq < 2^20, layer < 256, site < 16.
DFLASH_HD inline std::uint32_t rng_stream(std::uint32_t seq, std::uint32_t layer, std::uint32_t site) {
  return (seq << 12) | (layer << 4) | site;
}

// The Philox block holding element e: counter (lo32(e/4), hi32(e/4), stream, step), word e mod 4.
DFLASH_HD inline std::uint32_t rng_word(std::uint64_t seed, std::uint32_t stream, std::uint32_t step,
                                        std::uint64_t element) {
  const std::uint64_t block = element / 4;
  const Philox4x32 counter{{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), stream, step}};
  return philox4x32_10(counter, philox_key_from_seed(seed)).v[element % 4];
}

// floor(p * 2^32): an element is dropped iff its word is below this. p in [0, 1).
DFLASH_HD inline std::uint32_t dropout_threshold(double p) { return static_cast<std::uint32_t>(p * 4294967296.0); }

DFLASH_HD inline bool dropout_keeps(std::uint64_t seed, std::uint32_t stream, std::uint32_t step, std::uint64_t element,
                                    std::uint32_t threshold) {
  return rng_word(seed, stream, step, element) >= threshold;
}

}  // namespace dflash
