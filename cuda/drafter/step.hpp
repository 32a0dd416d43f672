// One training step of the DFlash drafter on the GPU: the CUDA twin of reference/drafter.hpp's
// drafter_step, with the same inputs (config, parameters, frozen weights, batch, step options)
// and the same outputs (loss statistics over W, every trainable parameter's gradient and dL/dF).
//
// The uploads and the loop are cuda/drafter/step_loop.hpp's, on CudaBackend and CudaLossHead here
// (on the CPU backends in the CPU tests). Per sequence, in order: anchors and block rows exactly as the reference prepares them
// (prepare_sequences, SPEC §4), the trunk (cuda/trunk/stack.hpp on cuda/trunk/device_backend.hpp, under options.trunk_policy), the
// CUDA loss head (cuda/loss_head/head.hpp, under options.loss_policy), the loss head's backward
// and the trunk's backward, accumulating the gradients on the device in fp32 (sequence order).
// Weight matrices, E, W_lm, F and G are rounded to bf16 on upload; norm weights stay fp32.
//
// Device memory, by category (as `dflash plan` plans it at production precision): parameters
// (bf16 matrices, fp32 norm weights), frozen (E and W_lm in bf16), gradients (fp32, one per parameter, and dL/dF of one sequence), inputs (one sequence's F, G
// rows, anchors, tokens, labels, weights), plus what the trunk and loss head policies keep
// (saved, loss_saved) and their transient workspace.
#pragma once

#include <optional>
#include <vector>

#include "cuda/drafter/gemms.hpp"
#include "cuda/drafter/sequence_step.hpp"
#include "cuda/drafter/step_loop.hpp"
#include "cuda/runtime/device_allocator.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "reference/drafter.hpp"

namespace dflash {

// Validates everything the reference validates first (config, parameters, batch, policies) and
// throws InputError naming the problem before touching the device.
CudaDrafterStepResult cuda_drafter_step(DeviceAllocator& allocator, MemoryTracker& host, const DrafterConfig& config,
                                        const DrafterParameters<double>& params, const FrozenWeights<double>& frozen,
                                        const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                        const std::optional<double>& global_weight_sum = std::nullopt);

// x[0, n) rounded to bf16 (through float, nearest even) in a new device buffer of category c.
DeviceBuffer<Bf16Bits> upload_bf16(DeviceAllocator& allocator, MemoryCategory c, const double* x, std::int64_t n);

// cuda_drafter_step's loop over the batch's sequences (prepared by prepare_sequences with
// `options`, the batch validated by the caller) on device-resident weights: each sequence's inputs
// uploaded, cuda_drafter_sequence_step over `weight_sum`, every gradient added into weights.grads
// in sequence order; dL/dF written into *features_grad ([nseq, S, K H], host) when it is given.
// The training step (distributed/cuda/train_step.hpp) calls it on its resident state and its
// run's cuBLAS handles (`gemms`, on allocator's stream: cuda/drafter/gemms.hpp). Returns the
// loss statistics summed over the sequences; `hits`, when given, receives each sequence's per-row
// flags [T] (1 where w01 = 1 and argmax z = y), one entry per sequence.
LossHeadStats<double> cuda_drafter_sequences(DeviceAllocator& allocator, CudaDrafterGemms& gemms, MemoryTracker& host,
                                             const DrafterConfig& config, const CudaDrafterWeights& weights,
                                             const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                             const LossHeadOptions& loss_options,
                                             const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                             Tensor<double>* features_grad,
                                             std::vector<std::vector<std::uint8_t>>* hits = nullptr,
                                             const Bf16Features* bf16 = nullptr);

// cuda_drafter_sequences' forward alone (evaluation, TRAINING §17): the same uploads, each
// sequence's trunk forward and loss head forward over `weight_sum`, no backward: no gradient is made
// and weights.grads are not touched. The loss head runs chunk_recompute whatever loss_options says
// (the policy whose forward computes only the statistics), so the device memory it takes is at most
// the training step's under any loss policy (planner/loss_head_memory.hpp: its copy of Y in bf16
// and row statistics against chunk_grad_in_forward's fp32 dL/dY; one chunk's logits against
// materialize's [T, V]), and the trunk's the same as in training. Returns the statistics and `hits` as
// cuda_drafter_sequences does.
LossHeadStats<double> cuda_drafter_forward_sequences(
    DeviceAllocator& allocator, CudaDrafterGemms& gemms, MemoryTracker& host, const DrafterConfig& config,
    const CudaDrafterWeights& weights, const DrafterBatch<double>& batch, const DrafterStepOptions& options,
    const LossHeadOptions& loss_options, const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
    std::vector<std::vector<std::uint8_t>>* hits = nullptr, const Bf16Features* bf16 = nullptr);

}  // namespace dflash
