// The cuBLAS handles of the drafter's loop, each with its allocator-counted workspace (transient):
// the trunk's linear layers (LinearGemm) and the loss head's products (CublasGemm), both on the
// allocator's stream.
//
// A training run makes them once and keeps them (distributed/cuda/training_backend.hpp): the
// cuBLAS documentation says cublasDestroy synchronizes the whole device. Destroyed after every
// step, the handles made the host wait there for ZeRO-0's bucket sums still in flight on the
// communication stream, outside the wait that polls the communicator for a failed peer
// (distributed/cuda/stream_wait.hpp): a peer lost mid-sum hung the rank instead of failing it.
// A single step (cuda_drafter_step) makes its own.
#pragma once

#include <cstddef>

#include "cuda/gemm/cublas.hpp"
#include "cuda/gemm/linear.hpp"
#include "cuda/runtime/device_allocator.hpp"

namespace dflash {

struct CudaDrafterGemms {
  explicit CudaDrafterGemms(DeviceAllocator& allocator) : trunk(allocator), head(allocator) {}

  LinearGemm trunk;
  CublasGemm head;

  // The device memory the two workspaces take (MemoryCategory::transient while they live).
  static constexpr std::size_t workspace_bytes() {
    return LinearGemm::kWorkspaceBytes + CublasGemm::kDefaultWorkspaceBytes;
  }
};

}  // namespace dflash
