// One training step of the DFlash drafter on the GPU: the CUDA twin of reference/drafter.hpp's
// drafter_step, with the same inputs (config, parameters, frozen weights, batch, step options)
// and the same outputs (loss statistics over W, every trainable parameter's gradient and dL/dF).
//
// Per sequence, in order: anchors and block rows exactly as the reference prepares them
// (prepare_sequences, SPEC §4), the trunk (cuda/trunk.hpp on cuda/cuda_backend.hpp, under options.trunk_policy), the
// CUDA loss head (cuda/loss_head_cuda.hpp, under options.loss_policy), the loss head's backward
// and the trunk's backward, accumulating the gradients on the device in fp32 (sequence order).
// Weight matrices, E, W_lm, F and G are rounded to bf16 on upload; norm weights stay fp32.
//
// Device memory, by category: parameters (bf16 matrices, fp32 norm weights), frozen (E, W_lm),
// gradients (fp32, one per parameter, and dL/dF of one sequence), inputs (one sequence's F, G
// rows, anchors, tokens, labels, weights), plus what the trunk and loss head policies keep
// (saved, loss_saved) and their transient workspace.
#pragma once

#include <optional>

#include "cuda/device_allocator.hpp"
#include "reference/drafter.hpp"

namespace dflash {

struct CudaDrafterStepResult {
  LossHeadStats<double> stats;          // loss, ce, kl over W; correct, valid_rows
  double weight_sum = 0;                // W
  DrafterParameters<double> grads;      // host copies, MemoryCategory::gradients of the host tracker
  Tensor<double> target_features_grad;  // dL/dF [nseq, S, K H]
};

// Validates everything the reference validates first (config, parameters, batch, policies) and
// throws InputError naming the problem before touching the device.
CudaDrafterStepResult cuda_drafter_step(DeviceAllocator& allocator, MemoryTracker& host, const DrafterConfig& config,
                                        const DrafterParameters<double>& params, const FrozenWeights<double>& frozen,
                                        const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                        const std::optional<double>& global_weight_sum = std::nullopt);

}  // namespace dflash
