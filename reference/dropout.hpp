// Dropout at one site of one layer (SPEC §6). The keep bit of element e is a pure function of
// (seed, step, sequence, layer, site, e) through Philox, so a mask is never stored: the forward,
// a checkpointed layer's recomputation and the backward each regenerate it from the coordinates.
// An optional observer sees every draw (tests use it to prove the replays are bitwise the same).
#pragma once

#include <cstdint>
#include <functional>

#include "common/dropout_rng.hpp"
#include "io/errors.hpp"

namespace dflash {

enum class DropoutPass { forward, recompute, backward };

struct DropoutDraw {
  DropoutPass pass;
  std::uint32_t sequence;
  std::uint32_t layer;
  DropoutSite site;
  std::uint64_t element;
  bool kept;
};
using DropoutObserver = std::function<void(const DropoutDraw&)>;

// Where in the step a layer runs: everything of the RNG coordinates but the layer and site.
struct DropoutCoordinates {
  std::uint64_t seed = 0;
  std::uint32_t step = 0;
  std::uint32_t sequence = 0;  // GLOBAL index of the sequence in the step's batch
  DropoutPass pass = DropoutPass::forward;
  const DropoutObserver* observer = nullptr;
};

template <class Real>
class DropoutSiteMask {
 public:
  DropoutSiteMask(const DropoutCoordinates& at, std::uint32_t layer, DropoutSite site, double p)
      : at_(at),
        layer_(layer),
        site_(site),
        stream_(rng_stream(at.sequence, layer, static_cast<std::uint32_t>(site))),
        threshold_(dropout_threshold(p)),
        active_(p > 0),
        scale_(Real(1) / (Real(1) - Real(p))) {
    if (!(p >= 0 && p < 1)) throw_input_error("dropout probability", str(p, " must lie in [0, 1)"));
  }

  bool active() const { return active_; }
  // Whether an observer sees the draws (it is called in draw order, so from one thread).
  bool observed() const { return active_ && at_.observer != nullptr; }

  // 0 where element e is dropped, 1/(1-p) where kept, exactly 1 when the site is off (p = 0).
  Real factor(std::uint64_t element) const {
    if (!active_) return Real(1);
    const bool kept = dropout_keeps(at_.seed, stream_, at_.step, element, threshold_);
    if (at_.observer != nullptr) (*at_.observer)(DropoutDraw{at_.pass, at_.sequence, layer_, site_, element, kept});
    return kept ? scale_ : Real(0);
  }

 private:
  DropoutCoordinates at_;
  std::uint32_t layer_;
  DropoutSite site_;
  std::uint32_t stream_;
  std::uint32_t threshold_;
  bool active_;
  Real scale_;
};

}  // namespace dflash
