// The DFlash attention mask of one layer of one sequence (SPEC §3) and the site-1 dropout
// coordinate (SPEC §6), as one per-element decision each, for the CUDA kernels and their CPU
// drivers. Keys are indexed over [context keys; block keys]: key j < S is context row j, key
// S + r is block row r = n'B + k'.
//
// The double reference (reference/attention.hpp) derives the same mask as key ranges per row;
// the CPU tests hold this per-element decision to those ranges on every (row, key) pair.
#pragma once

#include <cstdint>

#include "common/hd.hpp"

namespace dflash {

struct AttentionMaskView {
  const std::int64_t* anchors = nullptr;  // [N] a_n, ascending
  const std::uint8_t* keep = nullptr;     // [N] kappa_n
  std::int64_t S = 0;                     // context keys
  std::int64_t B = 0;                     // block size
  bool sliding = false;                   // sliding_attention layer
  std::int64_t window = 0;                // sliding_window (read only when sliding)

  // Does query (n, k) see key `key`? Context key j: kappa_n = 1, j < a_n and, sliding,
  // j >= a_n + k - (window - 1). Block key (n', k'): kappa_n = 1, n' = n and, sliding, k' <= k.
  DFLASH_HD bool visible(std::int64_t n, std::int64_t k, std::int64_t key) const {
    if (keep[n] == 0) return false;
    const std::int64_t a = anchors[n];
    if (key < S) return key < a && (!sliding || key >= a + k - (window - 1));
    const std::int64_t row = key - S;
    return row / B == n && (!sliding || row % B <= k);
  }

  // The context keys any query of block n may see: [first, a_n) with first the k = 0 row's
  // window start (later rows of a sliding block start later), empty when kappa_n = 0.
  DFLASH_HD std::int64_t context_begin(std::int64_t n) const {
    if (!sliding) return 0;
    const std::int64_t first = anchors[n] - (window - 1);
    return first > 0 ? first : 0;
  }
  DFLASH_HD std::int64_t context_end(std::int64_t n) const { return keep[n] == 0 ? 0 : anchors[n]; }
};

// Site 1 element index (SPEC §6): (h T + i)(S + T) + key, key over [context keys; block keys].
DFLASH_HD inline std::uint64_t attention_dropout_element(std::int64_t h, std::int64_t i, std::int64_t key,
                                                         std::int64_t S, std::int64_t T) {
  return (static_cast<std::uint64_t>(h) * static_cast<std::uint64_t>(T) + static_cast<std::uint64_t>(i)) *
             static_cast<std::uint64_t>(S + T) +
         static_cast<std::uint64_t>(key);
}

}  // namespace dflash
