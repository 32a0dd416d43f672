// Parameters, their gradients, master copies and AdamW moments, per GPU (SPEC §8 "parameters
// (trainable and frozen), gradients, optimizer state"), under a precision and a parallel layout:
//   parameters       P x parameter_bytes                    (every GPU runs the whole model)
//   frozen           2 V H x frozen_bytes                   (embedding and lm_head, untied)
//   master_weights   P' x master_bytes                      P' = the ZeRO-1 shard (P padded to G 128, / G), else P;
//                                                           in_place_flat: the shard clipped to P (rank 0's, the largest)
//   gradients        P x gradient_bytes                     (ZeRO-1 keeps whole gradients; stage 2 would shard them);
//                                                           in_place_flat: the padded P'' = P rounded up to G 128
//   optimizer_state  P' x optimizer_state_bytes             (AdamW m and v)
//   communication    gradient buckets of gradient_bytes elements (parallel_layout.hpp)
#pragma once

#include <cstdint>

#include "planner/parallel_layout.hpp"
#include "planner/plan_category.hpp"
#include "planner/training_precision.hpp"
#include "reference/drafter_config.hpp"

namespace dflash {

struct ParameterCounts {
  std::int64_t trainable = 0;     // P: every tensor of SPEC §3's parameter list
  std::int64_t frozen = 0;        // E and W_lm: 2 V H
  std::int64_t norm_weights = 0;  // of P, the RMSNorm weights (every vector): fp32 on the CUDA step
};

ParameterCounts drafter_parameter_counts(const DrafterConfig& config);

CategoryBytes parameter_memory(const ParameterCounts& counts, const TrainingPrecision& precision,
                               const ParallelLayout& layout);

}  // namespace dflash
