// What the CPU tests of the CUDA training step share: the drafter step the gradient is held to,
// host_drafter_step (the device step's own code on the CPU backends) on the working copy with
// the global W.
#pragma once

#include <vector>

#include "harness/cuda/drafter_step_twin.hpp"
#include "tests/distributed/cuda/train_step_cases.hpp"

namespace dflash::testing {

inline DrafterStepGradient host_step_gradient(MemoryTracker&, const DrafterConfig& config,
                                              const DrafterParameters<double>& working,
                                              const FrozenWeights<double>& frozen, const DrafterBatch<double>& batch,
                                              const DrafterStepOptions& options, double W) {
  const StepValues v = host_drafter_step(config, working, frozen, batch, options, nullptr, nullptr, W);
  DrafterStepGradient out;
  for (const std::vector<double>& g : v.grads) out.flat.insert(out.flat.end(), g.begin(), g.end());
  out.stats.loss = v.losses[0];
  out.stats.ce = v.losses[1];
  out.stats.kl = v.losses[2];
  out.stats.correct = v.correct;
  out.stats.valid_rows = v.valid_rows;
  return out;
}

}  // namespace dflash::testing
