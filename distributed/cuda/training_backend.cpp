#include "distributed/cuda/training_backend.hpp"

#include "cuda/optimizer/adamw_kernels.hpp"
#include "cuda/runtime/check.hpp"

namespace dflash {

void CudaTrainingBackend::read(void* host, const void* device, std::size_t bytes) const {
  copy_to_host(allocator, host, device, bytes);
}

void CudaTrainingBackend::write(void* device, const void* host, std::size_t bytes) const {
  copy_to_device(allocator, device, host, bytes);
}

void CudaTrainingBackend::zero(void* device, std::size_t bytes) const { zero_on_device(allocator, device, bytes); }

void CudaTrainingBackend::synchronize() const { allocator.synchronize(); }

void CudaTrainingBackend::squared_norm(const float* g, std::int64_t n, double* partials, double* out) const {
  launch_squared_norm_partials(g, n, partials, allocator.stream());
  launch_squared_norm_finish(partials, norm_blocks(n), out, allocator.stream());
}

void CudaTrainingBackend::adamw_step(const AdamWRange& range) const { launch_adamw_step(range, allocator.stream()); }

void CudaTrainingBackend::bf16_copy(const float* master, std::int64_t n, Bf16Bits* working) const {
  launch_bf16_copy(master, n, working, allocator.stream());
}

LossHeadStats<double> CudaTrainingBackend::drafter_sequences(
    MemoryTracker& host, const DrafterConfig& config, const CudaDrafterWeights& weights,
    const DrafterBatch<double>& batch, const DrafterStepOptions& options, const LossHeadOptions& loss_options,
    const std::vector<PreparedSequence<double>>& seqs, double weight_sum, std::vector<std::vector<std::uint8_t>>* hits,
    const Bf16Features* bf16) const {
  return cuda_drafter_sequences(allocator, *gemms, host, config, weights, batch, options, loss_options, seqs,
                                weight_sum, nullptr, hits, bf16);
}

LossHeadStats<double> CudaTrainingBackend::drafter_forward_sequences(
    MemoryTracker& host, const DrafterConfig& config, const CudaDrafterWeights& weights,
    const DrafterBatch<double>& batch, const DrafterStepOptions& options, const LossHeadOptions& loss_options,
    const std::vector<PreparedSequence<double>>& seqs, double weight_sum, std::vector<std::vector<std::uint8_t>>* hits,
    const Bf16Features* bf16) const {
  return cuda_drafter_forward_sequences(allocator, *gemms, host, config, weights, batch, options, loss_options, seqs,
                                        weight_sum, hits, bf16);
}

CudaTrainingBackend::CommunicationStream::CommunicationStream(const CudaTrainingBackend& backend)
    : compute_(backend.allocator.stream()) {
  DFLASH_CUDA_CHECK(cudaStreamCreateWithFlags(&communication_, cudaStreamNonBlocking));
  DFLASH_CUDA_CHECK(cudaEventCreateWithFlags(&gradients_ready_, cudaEventDisableTiming));
  DFLASH_CUDA_CHECK(cudaEventCreateWithFlags(&sums_ready_, cudaEventDisableTiming));
}

CudaTrainingBackend::CommunicationStream::~CommunicationStream() {
  // Nothing may still read the gradient when the stream goes (an exception between a sum's issue
  // and compute_waits). The communicator's wait polls for a failed peer, where a bare
  // cudaStreamSynchronize would block for good; on one it aborts the communicator (its in-flight
  // sums end) and throws, which a destructor must not pass on: the exception already unwinding
  // says what went wrong first.
  if (communication_ != nullptr && device_ != nullptr) {
    try {
      device_->wait_for_stream(communication_);
    } catch (...) {}
  }
  if (communication_ != nullptr) cudaStreamSynchronize(communication_);
  if (sums_ready_ != nullptr) cudaEventDestroy(sums_ready_);
  if (gradients_ready_ != nullptr) cudaEventDestroy(gradients_ready_);
  if (communication_ != nullptr) cudaStreamDestroy(communication_);
}

void CudaTrainingBackend::CommunicationStream::after_compute() {
  DFLASH_CUDA_CHECK(cudaEventRecord(gradients_ready_, compute_));
  DFLASH_CUDA_CHECK(cudaStreamWaitEvent(communication_, gradients_ready_, 0));
}

void CudaTrainingBackend::CommunicationStream::all_reduce_sum(Communicator& device, float* buffer, std::size_t count) {
  device_ = &device;
  device.all_reduce_in_place_on_stream(buffer, count, CommType::f32, CommOp::sum, communication_);
}

void CudaTrainingBackend::CommunicationStream::compute_waits(Communicator& device) {
  device.wait_for_stream(communication_);  // a failed sum throws here instead of hanging a later read
  DFLASH_CUDA_CHECK(cudaEventRecord(sums_ready_, communication_));
  DFLASH_CUDA_CHECK(cudaStreamWaitEvent(compute_, sums_ready_, 0));
}

}  // namespace dflash
