// One dropout site of one layer of one sequence (SPEC §6) as a kernel reads it: the Philox
// coordinates, the threshold and the scale, by value. factor(e) is 0 or 1/(1-p) for element e,
// exactly 1 when the site is off (p = 0), regenerated wherever it is needed, never stored.
#pragma once

#include <cstdint>

#include "common/dropout_rng.hpp"
#include "common/hd.hpp"

namespace dflash {

struct DropoutSiteView {
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;  // rng_stream(sequence, layer, site)
  std::uint32_t step = 0;
  std::uint32_t threshold = 0;  // dropout_threshold(p)
  bool active = false;          // p > 0
  float scale = 1.0f;           // 1 / (1 - p), computed in float as the fp32 reference does

  DFLASH_HD float factor(std::uint64_t element) const {
    if (!active) return 1.0f;
    return dropout_keeps(seed, stream, step, element, threshold) ? scale : 0.0f;
  }
};

// Site `site` of `layer` for global sequence `sequence` at optimizer step `step`; p in [0, 1).
DFLASH_HD inline DropoutSiteView dropout_site_view(std::uint64_t seed, std::uint32_t step, std::uint32_t sequence,
                                                   std::uint32_t layer, DropoutSite site, double p) {
  DropoutSiteView v;
  v.seed = seed;
  v.stream = rng_stream(sequence, layer, static_cast<std::uint32_t>(site));
  v.step = step;
  v.threshold = dropout_threshold(p);
  v.active = p > 0;
  v.scale = 1.0f / (1.0f - static_cast<float>(p));
  return v;
}

}  // namespace dflash
