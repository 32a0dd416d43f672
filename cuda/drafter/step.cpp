#include "cuda/drafter/step.hpp"

#include <vector>

#include "cuda/drafter/sequence_step.hpp"
#include "cuda/drafter/step_loop.hpp"
#include "cuda/loss_head/head.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/trunk/device_backend.hpp"

namespace dflash {
namespace {

// The loop of cuda_drafter_sequences (backward: forward and backward of each sequence) and of
// cuda_drafter_forward_sequences (forward only) on the device, on the caller's cuBLAS handles.
LossHeadStats<double> run_sequences(DeviceAllocator& allocator, CudaDrafterGemms& gemms, MemoryTracker& host,
                                    const DrafterConfig& config, const CudaDrafterWeights& weights,
                                    const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                    const LossHeadOptions& loss_options,
                                    const std::vector<PreparedSequence<double>>& seqs, double weight_sum, bool backward,
                                    Tensor<double>* features_grad, std::vector<std::vector<std::uint8_t>>* hits,
                                    const Bf16Features* bf16 = nullptr) {
  const CudaBackend backend{allocator, gemms.trunk};
  CudaLossHead head(allocator, loss_options, gemms.head);
  return drafter_sequences_on(backend, head, host, config, weights, batch, options, seqs, weight_sum, backward,
                              features_grad, hits, bf16);
}

}  // namespace

DeviceBuffer<Bf16Bits> upload_bf16(DeviceAllocator& a, MemoryCategory c, const double* x, std::int64_t n) {
  return upload_bf16_to(DeviceMemory{a}, c, x, n);
}

LossHeadStats<double> cuda_drafter_sequences(DeviceAllocator& allocator, CudaDrafterGemms& gemms, MemoryTracker& host,
                                             const DrafterConfig& config, const CudaDrafterWeights& weights,
                                             const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                             const LossHeadOptions& loss_options,
                                             const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                             Tensor<double>* features_grad,
                                             std::vector<std::vector<std::uint8_t>>* hits, const Bf16Features* bf16) {
  return run_sequences(allocator, gemms, host, config, weights, batch, options, loss_options, seqs, weight_sum, true,
                       features_grad, hits, bf16);
}

LossHeadStats<double> cuda_drafter_forward_sequences(
    DeviceAllocator& allocator, CudaDrafterGemms& gemms, MemoryTracker& host, const DrafterConfig& config,
    const CudaDrafterWeights& weights, const DrafterBatch<double>& batch, const DrafterStepOptions& options,
    const LossHeadOptions& loss_options, const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
    std::vector<std::vector<std::uint8_t>>* hits, const Bf16Features* bf16) {
  // chunk_recompute's forward computes the statistics alone: chunk_grad_in_forward's would also make
  // dL/dY, materialize's keep every row's logits.
  LossHeadOptions forward_only = loss_options;
  forward_only.policy = LossPolicy::chunk_recompute;
  return run_sequences(allocator, gemms, host, config, weights, batch, options, forward_only, seqs, weight_sum, false,
                       nullptr, hits, bf16);
}

CudaDrafterStepResult cuda_drafter_step(DeviceAllocator& allocator, MemoryTracker& host, const DrafterConfig& config,
                                        const DrafterParameters<double>& params, const FrozenWeights<double>& frozen,
                                        const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                        const std::optional<double>& global_weight_sum) {
  const CheckedDrafterStep c = check_drafter_step(config, params, frozen, batch, options, global_weight_sum);
  CudaDrafterGemms gemms(allocator);
  const CudaBackend backend{allocator, gemms.trunk};
  CudaLossHead head(allocator, c.loss_options, gemms.head);
  return drafter_step_on(backend, head, host, config, params, frozen, batch, options, c.seqs, c.weight_sum);
}

}  // namespace dflash
