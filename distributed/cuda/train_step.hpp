// One optimizer step of the CUDA backend on R ranks (TRAINING §11–§13), the twin of
// train_step.hpp's reference step on a CudaTrainingState:
//   1. W over the rank's sequences (anchors from (seed, t, g)), all-reduced before any backward;
//   2. the flat fp32 gradient zeroed, then forward and backward of every sequence on the device
//      (cuda_drafter_sequences: bf16 working copy, fp32 accumulation into the gradient's views);
//   3. the non-finite rule on the rank's own gradient (per-tensor squared norms on the device, the
//      first bad element found by downloading that tensor) and loss, every rank's report gathered:
//      the same NonFiniteStepError as the reference, nothing applied;
//   4. gradients summed over ranks in place on the device: ZeRO-0 all-reduces the plan's buckets
//      on a communication stream, each as soon as the last sequence's backward has finished it
//      (bucket_reduction.hpp; step 3 then reads the norms taken before the sums), ZeRO-1
//      reduce-scatters the padded vector after the backward (rank r keeps shard r);
//   5. n = ||g||: a fixed two-level tree in double over the rank's part (ZeRO-1: the squares
//      all-reduced), the clip coefficient, lr_t (common/adamw.hpp) and the fp32 AdamW kernel over
//      the owned range, matrices decayed, norm weights never;
//   6. the working copy refreshed from the master weights (ZeRO-1: all-gathered first).
// Metrics are the reference's StepMetrics, equal on every rank.
// The orchestration is train_step_loop.hpp's, over a training backend: here the GPU's
// (training_backend.hpp), in the CPU tests the host's twin.
#pragma once

#include <span>

#include "distributed/cuda/training_backend.hpp"
#include "distributed/cuda/training_state.hpp"
#include "distributed/train_step.hpp"

namespace dflash {

extern template class DeviceTrainingState<CudaTrainingBackend>;

// The state on the GPU of `allocator` (built only with CUDA, library dflash_cuda_training).
class CudaTrainingState : public DeviceTrainingState<CudaTrainingBackend> {
 public:
  CudaTrainingState(DeviceAllocator& allocator, CudaCommunicators comm, const DrafterConfig& config,
                    const TrainingConfig& training, const FrozenWeights<double>& frozen, const OptimizerState& state)
      : DeviceTrainingState(CudaTrainingBackend{{allocator}}, comm, config, training, frozen, state) {}
  DeviceAllocator& allocator() const { return backend().allocator; }
};

// `host` counts the host-side inputs of the step (prepared rows, teacher rows); the device's
// bytes are counted by state.allocator(). options.bucket_bytes sizes ZeRO-0's buckets,
// options.reduce_during_backward = false issues them all after the backward;
// options.dropout_observer is not supported on the device (InputError).
StepMetrics cuda_train_step(MemoryTracker& host, CudaTrainingState& state, const DrafterConfig& config,
                            const TrainingConfig& training, std::span<const RankSequences> sequences,
                            const TrainStepOptions& options = {});

}  // namespace dflash
