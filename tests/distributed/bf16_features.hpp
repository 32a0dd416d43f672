// A batch's F and G as a CUDA rank's step is handed them (RankSequences::bf16_features): rounded to
// bf16, moved out of the batch, which keeps its tokens, mask and anchors. `dflash train` reads the
// bits straight off a shard (FeatureDataset::sequence_bf16_batch); the tests make them from a
// generated batch's doubles with the upload's rounding (bf16_bits_into), so that a step handed these
// bits can be held bitwise to the same step handed the doubles.
#pragma once

#include <stdexcept>

#include "reference/bf16_bits.hpp"
#include "reference/drafter_batch.hpp"

namespace dflash {

// x [nseq, S, width] rounded to bf16; a generated test batch is finite and within bf16's range.
inline Tensor<Bf16Bits> bf16_rounded(MemoryTracker& tracker, const Tensor<double>& x) {
  Tensor<Bf16Bits> bits(tracker, MemoryCategory::inputs, x.shape());
  bf16_bits_into(x.data(), x.numel(), bits.data());
  if (first_non_finite_bf16(bits.data(), bits.numel()) >= 0) {
    throw std::invalid_argument("test batch: a feature beyond bf16's range");
  }
  return bits;
}

inline Bf16Features round_features_to_bf16(MemoryTracker& tracker, DrafterBatch<double>& batch) {
  Bf16Features f{bf16_rounded(tracker, batch.target_features), bf16_rounded(tracker, batch.teacher_hidden)};
  batch.target_features = Tensor<double>();
  batch.teacher_hidden = Tensor<double>();
  return f;
}

}  // namespace dflash
