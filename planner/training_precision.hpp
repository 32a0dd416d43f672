// Element sizes of a training step, per kind of tensor. Production (the default) is the usual
// mixed-precision recipe:
//   bf16 weights for forward/backward (2 B), fp32 master weights (4 B), fp32 AdamW m and v (8 B
//   per parameter), fp32 gradients (4 B: accumulated over micro-steps and reduced across ranks
//   without bf16 rounding; also the loss head's dL/dY, as the CUDA loss head produces it),
//   bf16 activations, logits and saved tensors (2 B), fp32 per-row
//   statistics (4 B, SPEC BACKGROUND "Precision"), bf16 frozen embedding/lm_head and bf16 inputs
//   (target features, teacher hidden states, as the target produced them).
// Whose trunk a plan follows: the CUDA trunk's mixed formats (planner/cuda_trunk_memory.hpp: fp32
// residual stream, q/k projections, statistics and gradients, activation_bytes for the GEMM and
// attention operands), the one implementation that runs at production precision; or the
// reference's list (reference/trunk_memory.hpp) at activation_bytes, statistics at statistic_bytes.
// The reference step computes in double with no optimizer: everything 8 B, no master copy, no
// moments. The reference training step (distributed/train_step.hpp) adds a double master copy of
// its part of the flat vector and double m and v (16 B per parameter).
#pragma once

#include <cstdint>

namespace dflash {

enum class TrunkMemoryModel { cuda, reference };

struct TrainingPrecision {
  std::int64_t parameter_bytes = 2;        // trainable weights as forward/backward read them
  std::int64_t master_bytes = 4;           // master copy of the trainable weights (0: none)
  std::int64_t optimizer_state_bytes = 8;  // per trainable parameter: AdamW m and v (0: no optimizer)
  std::int64_t gradient_bytes = 4;         // parameter gradients, the loss head's dL/dY
  std::int64_t frozen_bytes = 2;           // embedding, lm_head
  std::int64_t activation_bytes = 2;       // activations, logits, saved tensors, the trunk's scratch
  std::int64_t statistic_bytes = 4;        // per-row statistics (rstd, logsumexp, ...)
  std::int64_t input_bytes = 2;            // target features, teacher hidden states
  TrunkMemoryModel trunk = TrunkMemoryModel::cuda;

  static TrainingPrecision production() { return {}; }
  static TrainingPrecision reference() { return {8, 0, 0, 8, 8, 8, 8, 8, TrunkMemoryModel::reference}; }
  static TrainingPrecision reference_training() { return {8, 8, 16, 8, 8, 8, 8, 8, TrunkMemoryModel::reference}; }
};

// Throws InputError naming the field: sizes >= 1, except master and optimizer state (>= 0).
void validate_training_precision(const TrainingPrecision& precision);

}  // namespace dflash
