// The GPU executor of cuda/exec/block_program.hpp: a phase is the calling thread's share followed by a
// block-wide barrier; the bookkeeping hooks cost nothing. Only the device pass runs it (the host
// pass of nvcc compiles empty bodies that are never called).
#pragma once

#include <cstdint>

#include "common/hd.hpp"

namespace dflash {

struct DeviceBlockExec {
  DFLASH_HD int threads() const {
#ifdef __CUDA_ARCH__
    return static_cast<int>(blockDim.x);
#else
    return 0;
#endif
  }
  template <class Phase>
  DFLASH_HD void phase(Phase&& body) const {
#ifdef __CUDA_ARCH__
    body(static_cast<int>(threadIdx.x));
    __syncthreads();
#else
    (void)body;
#endif
  }
  DFLASH_HD void visit(std::int64_t) const {}
  DFLASH_HD void drew(std::uint64_t, float) const {}
};

}  // namespace dflash
