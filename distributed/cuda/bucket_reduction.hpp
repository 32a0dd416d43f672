// ZeRO-0's sum over ranks of the CUDA step's flat fp32 gradient, bucket by bucket, each bucket's
// all-reduce issued as soon as the backward of the rank's last sequence has finished it: the CUDA
// twin of gradient_reduction.hpp, on the same schedule (issue_complete_buckets over the plan's
// GradientBuckets in fp32: the buckets of layer L-1 are summed while layers L-2 ... 0 run their
// backward).
//
// Streams: the backward runs on the allocator's (compute) stream and announces, on the host, when
// a group of gradients is final (DrafterStepOptions::gradients_final, cuda/trunk/stack.hpp). For the
// buckets that completes, an event is recorded on the compute stream, the communication stream
// waits for it, and each bucket's in-place all-reduce is enqueued there
// (Communicator::all_reduce_in_place_on_stream). finish() makes the compute stream wait for every
// collective, so what follows (the norm, AdamW) reads the sums. The same collective runs on the
// same bucket of the same data as when everything waited for the end of the backward: only the
// moment changes, and the sums are bitwise the same.
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

#include "distributed/cuda/training_state.hpp"
#include "distributed/gradient_reduction.hpp"

namespace dflash {

class CudaBucketReduction {
 public:
  // For a ZeRO-0 state; buckets of bucket_bytes (the plan's) in fp32.
  CudaBucketReduction(CudaTrainingState& state, std::int64_t bucket_bytes);
  ~CudaBucketReduction();
  CudaBucketReduction(const CudaBucketReduction&) = delete;
  CudaBucketReduction& operator=(const CudaBucketReduction&) = delete;

  // The gradients of the tensors from position `first` on are final (issued on the compute
  // stream): their squared norms, then every bucket they complete, last bucket first.
  void gradients_final_from(std::size_t first);
  // After the backward: every bucket must have been issued (the backward ends by announcing 0);
  // the compute stream waits for their all-reduces.
  void finish();

  // Per tensor, the squared norm of this rank's own gradient (before any sum), on the device.
  const double* local_squared_norms() const { return norms_.data(); }

 private:
  CudaTrainingState& state_;
  GradientBuckets buckets_;
  DeviceBuffer<double> partials_, norms_;
  std::size_t final_tensors_from_;  // tensors [final_tensors_from_, count) are final
  std::int64_t next_;               // the next bucket to issue, -1 when all were
  cudaStream_t communication_ = nullptr;
  cudaEvent_t gradients_ready_ = nullptr, sums_ready_ = nullptr;
};

}  // namespace dflash
