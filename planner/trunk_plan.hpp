// The drafter trunk's memory for one sequence (S context rows, T = N B block rows), per trunk
// policy, from the config alone, following the trunk the precision names (precision.trunk):
//  - cuda (production): what cuda/trunk/stack.hpp allocates, planner/cuda_trunk_memory.hpp (saved and
//    transient peaks to the byte; Storage = activation_bytes, every fp32 buffer 4 B); dL/dF
//    [S, K H] in fp32, as the CUDA trunk accumulates it;
//  - reference: exactly the tensors reference/trunk_memory.hpp lists for the policy (the
//    reference's own account of what SequenceTrunk keeps; its peak is held against the tracker in
//    the tests); transient: the largest sum of scratch alive at one time, phase by phase, as
//    reference/drafter_trunk.hpp and reference/drafter_layer.hpp allocate it (see trunk_plan.cpp);
//    dL/dF [S, K H] at activation_bytes.
// Reference element sizes: activations and scratch at activation_bytes; the per-row statistics the
// saved list holds (every *_rstd and *_lse) at statistic_bytes. The saved peak is computed in
// elements; when statistics are wider than activations (fp32 vs bf16) the statistics of every
// tensor that can be alive at the peak are charged the difference, which bounds the peak from above.
#pragma once

#include <cstdint>

#include "planner/activation_memory.hpp"
#include "planner/cuda_trunk_memory.hpp"
#include "planner/training_precision.hpp"
#include "reference/drafter_dims.hpp"
#include "reference/trunk_memory.hpp"
#include "reference/trunk_policy.hpp"

namespace dflash {

struct TrunkPlan {
  TrunkSavedPlan saved_tensors;         // the reference's list for the policy (reference model only)
  std::int64_t saved_bytes = 0;         // peak of MemoryCategory::saved
  std::int64_t transient_bytes = 0;     // peak of the trunk's scratch (MemoryCategory::transient)
  std::int64_t feature_grad_bytes = 0;  // dL/dF [S, K H], handed back as a gradient
};

// Throws InputError naming the field (context, tokens, checkpoint_every).
TrunkPlan plan_trunk(const DrafterDims& dims, TrunkPolicy policy, std::int64_t checkpoint_every,
                     const TrainingPrecision& precision);

// The JSON "activations" summary of the trunk: values per block token per layer (the T-row
// tensors of reference/trunk_memory.hpp; the context rows each layer keeps are in the byte
// counts), every layer kept (policy none), the residual stream alone, and every_k with k; the
// bytes in the formats of the precision's trunk.
ActivationMemory trunk_activation_summary(const DrafterDims& dims, std::int64_t checkpoint_every,
                                          const TrainingPrecision& precision);

}  // namespace dflash
