// What the CUDA training step (train_step_loop.hpp) and its resident state (training_state.hpp)
// ask of the machine a rank runs on, here its GPU: DeviceMemory's buffers and copies, a ranged
// read back, the optimizer's kernels (cuda/optimizer/adamw_kernels.hpp), the drafter's loop over
// the rank's sequences (cuda_drafter_sequences, and the forward alone for evaluation), the memory
// counts, and the communication stream ZeRO-0's buckets are summed on. The CPU runs the same step on HostTrainingBackend
// (harness/cuda/host_training_backend.hpp): the kernels' programs over their real grids, the
// drafter's loop on the CPU backends, every collective at once on the caller's thread.
// Built only with CUDA (library dflash_cuda_training).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/drafter/gemms.hpp"
#include "cuda/drafter/step.hpp"
#include "cuda/optimizer/adamw_program.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "distributed/communicator.hpp"

namespace dflash {

struct CudaTrainingBackend : DeviceMemory {
  // The run's cuBLAS handles, made with the backend and shared by its copies (the state holds
  // one): kept for the run, since destroying one synchronizes the device (cuda/drafter/gemms.hpp).
  std::shared_ptr<CudaDrafterGemms> gemms = std::make_shared<CudaDrafterGemms>(allocator);

  // bytes from the device to the host, after everything the stream was given.
  void read(void* host, const void* device, std::size_t bytes) const;
  // bytes from the host to the device, after everything the stream was given; returns once `host`
  // may be reused.
  void write(void* device, const void* host, std::size_t bytes) const;
  void zero(void* device, std::size_t bytes) const;
  // Waits for the stream: what a collective on another stream reads is written.
  void synchronize() const;

  // *out = the squared norm of g[0, n) (the tree of cuda/optimizer/adamw_program.hpp); partials
  // holds kNormMaxBlocks values.
  void squared_norm(const float* g, std::int64_t n, double* partials, double* out) const;
  void adamw_step(const AdamWRange& range) const;
  // working[0, n) = bf16 of master[0, n).
  void bf16_copy(const float* master, std::int64_t n, Bf16Bits* working) const;

  // Forward and backward of each of the batch's sequences over W, gradients added into
  // weights.grads (cuda_drafter_sequences, no dL/dF); F and G from `bf16` when given.
  LossHeadStats<double> drafter_sequences(MemoryTracker& host, const DrafterConfig& config,
                                          const CudaDrafterWeights& weights, const DrafterBatch<double>& batch,
                                          const DrafterStepOptions& options, const LossHeadOptions& loss_options,
                                          const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                          std::vector<std::vector<std::uint8_t>>* hits,
                                          const Bf16Features* bf16 = nullptr) const;

  // The forward alone of each sequence over W (cuda_drafter_forward_sequences: evaluation, no
  // gradient made).
  LossHeadStats<double> drafter_forward_sequences(MemoryTracker& host, const DrafterConfig& config,
                                                  const CudaDrafterWeights& weights, const DrafterBatch<double>& batch,
                                                  const DrafterStepOptions& options,
                                                  const LossHeadOptions& loss_options,
                                                  const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                                  std::vector<std::vector<std::uint8_t>>* hits,
                                                  const Bf16Features* bf16 = nullptr) const;

  // What the device holds, per category, and the start of a new peak.
  const MemoryTracker& counts() const { return allocator.tracker(); }
  void reset_peaks() const { allocator.reset_peaks(); }

  // A second stream for the sums over ranks: after_compute() orders what is enqueued next after
  // everything the compute stream was given so far; all_reduce_sum enqueues an in-place sum
  // (Communicator::all_reduce_in_place_on_stream) and returns at once; compute_waits(device) waits
  // on the host for every sum (device.wait_for_stream: a sum that failed in flight throws instead
  // of hanging the rank) and orders the compute stream's next work after them. Destroyed, it waits
  // for its sums first, as compute_waits does (an exception thrown between a sum's issue and
  // compute_waits: a peer lost meanwhile aborts the communicator instead of hanging the rank).
  class CommunicationStream {
   public:
    explicit CommunicationStream(const CudaTrainingBackend& backend);
    ~CommunicationStream();
    CommunicationStream(const CommunicationStream&) = delete;
    CommunicationStream& operator=(const CommunicationStream&) = delete;
    void after_compute();
    void all_reduce_sum(Communicator& device, float* buffer, std::size_t count);
    void compute_waits(Communicator& device);

   private:
    cudaStream_t compute_;  // the allocator's
    cudaStream_t communication_ = nullptr;
    Communicator* device_ = nullptr;  // the communicator of the sums issued, for the destructor's wait
    cudaEvent_t gradients_ready_ = nullptr, sums_ready_ = nullptr;
  };
};

}  // namespace dflash
