// The CPU's training backend: what distributed/cuda/training_backend.hpp's CudaTrainingBackend
// does on the GPU, done on the host, so that the CUDA training step's orchestration
// (distributed/cuda/train_step_loop.hpp) and its resident state (DeviceTrainingState) run in CI:
//   - buffers are HostMemory's, counted by `tracker` (as the device allocator counts the GPU's) and
//     filled with NaN bytes when made (device memory is not initialised);
//   - the optimizer kernels are their programs over the launchers' grids
//     (harness/cuda/host_optimizer_exec.hpp);
//   - the drafter's loop is the device step's own code on the CPU backends (drafter_step_on's
//     loop on device_step_trunk_on_host and the loss head's chunk loop on HostLossHeadBackend);
//   - the communication stream sums each bucket at once, when it is issued, through the device
//     communicator (MPI or single process: host memory). A bucket issued before its gradients are
//     final is summed before they are, as a stream that did not wait would on the GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/loss_head/chunked_head.hpp"
#include "distributed/communicator.hpp"
#include "harness/cuda/drafter_step_twin.hpp"
#include "harness/cuda/host_loss_head_backend.hpp"
#include "harness/cuda/host_optimizer_exec.hpp"

namespace dflash {

struct HostTrainingBackend : HostMemory {
  void read(void* host, const void* device, std::size_t bytes) const { copy(host, device, bytes); }
  void zero(void* device, std::size_t bytes) const {
    if (bytes > 0) std::memset(device, 0, bytes);
  }
  void synchronize() const {}

  void squared_norm(const float* g, std::int64_t n, double* partials, double* out) const {
    squared_norm_on_host(g, n, partials, out);
  }
  void adamw_step(const AdamWRange& range) const {
    elementwise_on_host(range.end - range.begin, false, [&](std::int64_t i) { adamw_step_at(i, range); });
  }
  void bf16_copy(const float* master, std::int64_t n, Bf16Bits* working) const {
    elementwise_on_host(n, false, [&](std::int64_t i) { bf16_copy_at(i, master, working); });
  }

  LossHeadStats<double> drafter_sequences(MemoryTracker& host, const DrafterConfig& config,
                                          const CudaDrafterWeights& weights, const DrafterBatch<double>& batch,
                                          const DrafterStepOptions& options, const LossHeadOptions& loss_options,
                                          const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                          std::vector<std::vector<std::uint8_t>>* hits) const {
    return host_drafter_sequences(tracker, host, config, weights, batch, options, loss_options, seqs, weight_sum, true,
                                  hits);
  }
  LossHeadStats<double> drafter_forward_sequences(MemoryTracker& host, const DrafterConfig& config,
                                                  const CudaDrafterWeights& weights, const DrafterBatch<double>& batch,
                                                  const DrafterStepOptions& options,
                                                  const LossHeadOptions& loss_options,
                                                  const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                                  std::vector<std::vector<std::uint8_t>>* hits) const {
    return host_drafter_sequences(tracker, host, config, weights, batch, options, loss_options, seqs, weight_sum, false,
                                  hits);
  }

  const MemoryTracker& counts() const { return tracker; }
  void reset_peaks() const { tracker.reset_peaks(); }

  class CommunicationStream {
   public:
    explicit CommunicationStream(const HostTrainingBackend&) {}
    void after_compute() {}
    void all_reduce_sum(Communicator& device, float* buffer, std::size_t count) {
      device.all_reduce(buffer, buffer, count, CommType::f32, CommOp::sum);
    }
    void compute_waits() {}
  };
};

}  // namespace dflash
