// A thread block's program written once for the GPU and for the CPU (DESIGN-NOTES: "kernels whose
// logic runs on the CPU"). A program is a DFLASH_HD function of an executor `exec` that runs its
// phases in order:
//   exec.phase([&](int thread) { ... });   every thread of the block runs the lambda, then a barrier
//   exec.threads()                         the block's thread count
//   exec.visit(id), exec.drew(element, f)  bookkeeping hooks (CPU: record the visited tiles and the
//                                          dropout draws; GPU: nothing)
// On the device (cuda/exec/block_device.cuh) a phase is the lambda for threadIdx.x followed by
// __syncthreads(); on the host (harness/cuda/host_block_exec.hpp) it is a loop over every thread.
// A phase may only write what its own thread owns and read what earlier phases wrote: then both
// executions compute the same values, and the CPU tests cover the kernel's real partition.
//
// SharedCarver lays a block's shared memory out the same way on both sides: with a null base it
// only measures (the launcher's dynamic shared memory size, the host driver's buffer size).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/hd.hpp"

namespace dflash {

class SharedCarver {
 public:
  DFLASH_HD explicit SharedCarver(unsigned char* base) : base_(base) {}

  // The next `count` values of T, 16-byte aligned (vector loads, any T up to 16 bytes).
  template <class T>
  DFLASH_HD T* take(std::int64_t count) {
    offset_ = (offset_ + 15) / 16 * 16;
    T* at = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + offset_);
    offset_ += static_cast<std::size_t>(count) * sizeof(T);
    return at;
  }
  DFLASH_HD std::size_t bytes() const { return (offset_ + 15) / 16 * 16; }

 private:
  unsigned char* base_;
  std::size_t offset_ = 0;
};

// The bytes a shared-memory layout (a struct built from a SharedCarver and `args`) occupies.
template <class Layout, class... Args>
DFLASH_HD std::size_t shared_layout_bytes(const Args&... args) {
  SharedCarver mem(nullptr);
  const Layout layout(mem, args...);
  (void)layout;
  return mem.bytes();
}

}  // namespace dflash
