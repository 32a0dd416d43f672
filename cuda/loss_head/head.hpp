// The production loss head on the GPU: the chunk loop (cuda/loss_head/chunked_head.hpp, where its
// policies, memory and checks are described) on CudaLossHeadBackend, with its own cuBLAS handle
// and workspace (CublasGemm, counted transient for the loss head's lifetime), or the caller's.
#pragma once

#include <memory>

#include "cuda/gemm/cublas.hpp"
#include "cuda/loss_head/chunked_head.hpp"
#include "cuda/loss_head/device_backend.hpp"
#include "cuda/runtime/device_allocator.hpp"
#include "cuda/runtime/device_buffer.hpp"

namespace dflash {

using CudaLossHeadSaved = ChunkedLossHeadSaved<CudaLossHeadBackend>;
using CudaLossHeadForward = ChunkedLossHeadForward<CudaLossHeadBackend>;

class CudaLossHead {
 public:
  using Forward = CudaLossHeadForward;
  using Saved = CudaLossHeadSaved;

  // Bad options are rejected before any device work (the cuBLAS handle included). The first form
  // makes its own cuBLAS handle; the second runs its products on `gemm`, which must be on
  // allocator's stream and outlive the loss head (a run's handles, cuda/drafter/gemms.hpp).
  CudaLossHead(DeviceAllocator& allocator, const LossHeadOptions& options);
  CudaLossHead(DeviceAllocator& allocator, const LossHeadOptions& options, CublasGemm& gemm);

  // ChunkedLossHead::forward: returns with all its work finished (it reads the totals back).
  CudaLossHeadForward forward(const Bf16Bits* hidden, const CudaLossHeadShape& shape, const CudaLossHeadTargets& in,
                              double weight_sum);

  // ChunkedLossHead::backward: only enqueues its work on allocator().stream(). Before the caller
  // frees or overwrites any of `in` from the host or another stream, wait with
  // allocator().synchronize() (or an event recorded on the stream).
  DeviceBuffer<float> backward(const CudaLossHeadTargets& in, CudaLossHeadSaved saved);

  const LossHeadOptions& options() const { return head_.options(); }
  DeviceAllocator& allocator() const { return allocator_; }

 private:
  DeviceAllocator& allocator_;
  LossHeadOptions options_;               // validated before own_gemm_ makes its handle
  std::unique_ptr<CublasGemm> own_gemm_;  // null where the handle is the caller's
  ChunkedLossHead<CudaLossHeadBackend> head_;
};

}  // namespace dflash
