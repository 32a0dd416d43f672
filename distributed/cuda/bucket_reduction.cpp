#include "distributed/cuda/bucket_reduction.hpp"

#include <stdexcept>
#include "cuda/runtime/check.hpp"

#include "io/errors.hpp"

namespace dflash {

CudaBucketReduction::CudaBucketReduction(CudaTrainingState& state, std::int64_t bucket_bytes)
    : state_(state),
      buckets_(
          gradient_buckets(state.layout().count(), state.layout().parallel_layout(bucket_bytes, 1), sizeof(float))),
      partials_(state.allocator(), MemoryCategory::transient, std::size_t(kNormMaxBlocks)),
      norms_(state.allocator(), MemoryCategory::transient, state.layout().tensors().size()),
      final_tensors_from_(state.layout().tensors().size()),
      next_(buckets_.count() - 1) {
  if (state.layout().zero_stage() != 0) {
    throw_input_error("CUDA bucket reduction", "ZeRO-1 reduce-scatters the padded vector after the backward");
  }
  DFLASH_CUDA_CHECK(cudaStreamCreateWithFlags(&communication_, cudaStreamNonBlocking));
  DFLASH_CUDA_CHECK(cudaEventCreateWithFlags(&gradients_ready_, cudaEventDisableTiming));
  DFLASH_CUDA_CHECK(cudaEventCreateWithFlags(&sums_ready_, cudaEventDisableTiming));
}

CudaBucketReduction::~CudaBucketReduction() {
  // Nothing may still read the gradient when the stream goes (an exception between issue and finish).
  if (communication_ != nullptr) cudaStreamSynchronize(communication_);
  if (sums_ready_ != nullptr) cudaEventDestroy(sums_ready_);
  if (gradients_ready_ != nullptr) cudaEventDestroy(gradients_ready_);
  if (communication_ != nullptr) cudaStreamDestroy(communication_);
}

void CudaBucketReduction::gradients_final_from(std::size_t first) {
  const std::vector<FlatTensor>& tensors = state_.layout().tensors();
  for (std::size_t t = first; t < final_tensors_from_; ++t) {
    launch_squared_norm(state_.allocator(), state_.gradient() + tensors[t].offset, tensors[t].numel, partials_.data(),
                        norms_.data() + t);
  }
  if (first < final_tensors_from_) final_tensors_from_ = first;
  bool recorded = false;
  Communicator& device = state_.communicators().device;
  next_ = issue_complete_buckets(buckets_, tensors.at(first).offset, next_, [&](std::int64_t k) {
    if (!recorded) {  // one event for every bucket this announcement completes
      DFLASH_CUDA_CHECK(cudaEventRecord(gradients_ready_, state_.allocator().stream()));
      DFLASH_CUDA_CHECK(cudaStreamWaitEvent(communication_, gradients_ready_, 0));
      recorded = true;
    }
    device.all_reduce_in_place_on_stream(state_.gradient() + buckets_.first(k), std::size_t(buckets_.elements(k)),
                                         CommType::f32, CommOp::sum, communication_);
  });
}

void CudaBucketReduction::finish() {
  if (next_ >= 0 || final_tensors_from_ != 0) {
    throw std::logic_error(str("CUDA bucket reduction: the backward ended with bucket ", next_,
                               " and the tensors before ", final_tensors_from_, " not announced final"));
  }
  DFLASH_CUDA_CHECK(cudaEventRecord(sums_ready_, communication_));
  DFLASH_CUDA_CHECK(cudaStreamWaitEvent(state_.allocator().stream(), sums_ready_, 0));
}

}  // namespace dflash
