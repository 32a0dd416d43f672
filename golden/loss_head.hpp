// The loss head's view of a golden: its inputs rebuilt from the stored tensors alone, and the
// loss-head outputs computed from them by the reference. A loss-head-only implementation (the
// CUDA loss head) starts from the same inputs: Y is output/hidden, so it is checked without the
// trunk.
#pragma once

#include <cstdint>
#include <vector>

#include "golden/file.hpp"

namespace dflash {

// Per sequence b: Y_b = output/hidden[b], the teacher rows G[a_n + k - 1] (0 where w01 = 0), and
// the labels, weights and w01 of SPEC §4 from the stored tokens, loss mask, anchors and keep.
// W is the whole batch's weight sum (SPEC §5).
struct GoldenLossHeadInputs {
  std::vector<Tensor<double>> hidden;   // [T, H] each
  std::vector<Tensor<double>> teacher;  // [T, H] each
  std::vector<SequenceBlocks<double>> blocks;
  double weight_sum = 0;

  // The loss head's targets for sequence b (pointers into this object and `frozen`).
  LossHeadTargets<double> targets(std::size_t b, const FrozenWeights<double>& frozen) const;
};

GoldenLossHeadInputs golden_loss_head_inputs(MemoryTracker& tracker, const Golden& golden);

// The loss-head outputs of a golden from its stored Y, by the reference loss head (the golden's
// loss policy and chunk rows): output/loss, ce, kl, accuracy, weight_sum, lse, token_loss.
// `magnitude`, if given, receives LossHeadStats::magnitude over the whole batch: the size of the
// log-partition functions the losses are made of (reference/loss_head_types.hpp).
GoldenResults reference_loss_head_results(MemoryTracker& tracker, const Golden& golden, double* magnitude = nullptr);

}  // namespace dflash
