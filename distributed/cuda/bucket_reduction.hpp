// ZeRO-0's sum over ranks of the CUDA step's flat fp32 gradient, bucket by bucket, each bucket's
// all-reduce issued as soon as the backward of the rank's last sequence has finished it: the CUDA
// twin of gradient_reduction.hpp, on the same schedule (issue_complete_buckets over the plan's
// GradientBuckets in fp32: the buckets of layer L-1 are summed while layers L-2 ... 0 run their
// backward).
//
// Streams (the backend's CommunicationStream, training_backend.hpp): the backward runs on the
// compute stream and announces, on the host, when a group of gradients is final
// (DrafterStepOptions::gradients_final, cuda/trunk/stack.hpp). For the buckets that completes, the
// communication stream is ordered after the compute stream's work so far, and each bucket's
// in-place all-reduce is enqueued there. finish() makes the compute stream wait for every
// collective, so what follows (the norm, AdamW) reads the sums. (The CPU's backend takes each sum
// when it is issued and lets it land only at finish(): harness/cuda/host_training_backend.hpp.)
// The same collective runs on the same bucket of the same data as when everything waited for the
// end of the backward: only the moment changes, and the sums are bitwise the same.
//
// The non-finite rule (§12) needs each rank's own gradient, which the sums overwrite: every newly
// final tensor's squared norm is computed on the compute stream before its bucket is handed over
// (local_squared_norms: per tensor, canonical order). Where one is not finite the step names this
// rank and that tensor exactly; the element it names is the first non-finite one of the summed
// tensor, which is this rank's own unless another rank holds an earlier one in the same tensor.
//
// ZeRO-1 is not reduced here: under §13's contiguous shards every bucket holds a piece of shard 0,
// and the CUDA step's in-place layout reduce-scatters the padded vector in one call after the
// backward (distributed/README.md, "Buckets issued during backward").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>

#include "distributed/cuda/training_state.hpp"
#include "distributed/gradient_reduction.hpp"
#include "io/errors.hpp"

namespace dflash {

template <class Backend>
class BucketReduction {
 public:
  // For a ZeRO-0 state; buckets of bucket_bytes (the plan's) in fp32.
  BucketReduction(DeviceTrainingState<Backend>& state, std::int64_t bucket_bytes)
      : state_(state),
        buckets_(
            gradient_buckets(state.layout().count(), state.layout().parallel_layout(bucket_bytes, 1), sizeof(float))),
        partials_(state.backend().template buffer<double>(MemoryCategory::transient, std::size_t(kNormMaxBlocks))),
        norms_(state.backend().template buffer<double>(MemoryCategory::transient, state.layout().tensors().size())),
        final_tensors_from_(state.layout().tensors().size()),
        next_(buckets_.count() - 1) {
    if (state.layout().zero_stage() != 0) {
      throw_input_error("CUDA bucket reduction", "ZeRO-1 reduce-scatters the padded vector after the backward");
    }
    communication_.emplace(state.backend());
  }
  BucketReduction(const BucketReduction&) = delete;
  BucketReduction& operator=(const BucketReduction&) = delete;

  // The gradients of the tensors from position `first` on are final (on the compute stream):
  // their squared norms, then every bucket they complete, last bucket first.
  void gradients_final_from(std::size_t first) {
    const std::vector<FlatTensor>& tensors = state_.layout().tensors();
    for (std::size_t t = first; t < final_tensors_from_; ++t) {
      state_.backend().squared_norm(state_.gradient() + tensors[t].offset, tensors[t].numel, partials_.data(),
                                    norms_.data() + t);
    }
    if (first < final_tensors_from_) final_tensors_from_ = first;
    bool ordered = false;
    Communicator& device = state_.communicators().device;
    next_ = issue_complete_buckets(buckets_, tensors.at(first).offset, next_, [&](std::int64_t k) {
      if (!ordered) {  // once for every bucket this announcement completes
        communication_->after_compute();
        ordered = true;
      }
      communication_->all_reduce_sum(device, state_.gradient() + buckets_.first(k), std::size_t(buckets_.elements(k)));
    });
  }
  // After the backward: every bucket must have been issued (the backward ends by announcing 0);
  // the compute stream waits for their all-reduces.
  void finish() {
    if (next_ >= 0 || final_tensors_from_ != 0) {
      throw std::logic_error(str("CUDA bucket reduction: the backward ended with bucket ", next_,
                                 " and the tensors before ", final_tensors_from_, " not announced final"));
    }
    communication_->compute_waits(state_.communicators().device);
  }

  // Per tensor, the squared norm of this rank's own gradient (before any sum), in the backend's memory.
  const double* local_squared_norms() const { return norms_.data(); }

 private:
  DeviceTrainingState<Backend>& state_;
  GradientBuckets buckets_;
  typename Backend::template Buffer<double> partials_, norms_;
  std::size_t final_tensors_from_;  // tensors [final_tensors_from_, count) are final
  std::int64_t next_;               // the next bucket to issue, -1 when all were
  // Made last, destroyed first: it waits for its sums while the buffers they read still live.
  std::optional<typename Backend::CommunicationStream> communication_;
};

}  // namespace dflash
