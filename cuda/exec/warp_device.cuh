// The GPU executor of warp programs (cuda/README.md, "Warp programs"): DeviceBlockExec's phases plus
// register state and warp-collective phases. A lane's registers are its own struct; lanes() runs
// the body on them, mma() issues the tensor-core instruction on the operands the body selects,
// exchange() is __shfl_xor_sync. The one device-only piece of the kernels' logic is the inline
// PTX in mma(); the CPU tests run the same programs through the host emulator
// (harness/cuda/host_warp_exec.hpp). Only the device pass runs it (the host pass of nvcc compiles
// empty bodies that are never called).
#pragma once

#include <cstdint>

#include "common/hd.hpp"
#include "cuda/exec/block_device.cuh"
#include "cuda/exec/mma_fragments.hpp"

namespace dflash {

template <class Registers>
class DeviceWarp {
 public:
  DFLASH_HD explicit DeviceWarp(Registers& own) : own_(own) {}

  DFLASH_HD int index() const {
#ifdef __CUDA_ARCH__
    return static_cast<int>(threadIdx.x) / kWarpLanes;
#else
    return 0;
#endif
  }
  template <class Body>
  DFLASH_HD void lanes(Body&& body) const {
#ifdef __CUDA_ARCH__
    body(static_cast<int>(threadIdx.x) % kWarpLanes, own_);
#else
    (void)body;
#endif
  }
  template <class Select>
  DFLASH_HD void mma(Select&& select) const {
#ifdef __CUDA_ARCH__
    const MmaOperands op = select(own_);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(op.c[0]), "+f"(op.c[1]), "+f"(op.c[2]), "+f"(op.c[3])
        : "r"(op.a[0]), "r"(op.a[1]), "r"(op.a[2]), "r"(op.a[3]), "r"(op.b[0]), "r"(op.b[1]));
#else
    (void)select;
#endif
  }
  template <class Value, class Combine>
  DFLASH_HD void exchange(int lane_mask, Value&& value, Combine&& combine) const {
#ifdef __CUDA_ARCH__
    const float other = __shfl_xor_sync(0xFFFFFFFFu, value(own_), lane_mask);
    combine(own_, other);
#else
    (void)lane_mask;
    (void)value;
    (void)combine;
#endif
  }

 private:
  Registers& own_;
};

struct DeviceWarpExec : DeviceBlockExec {
  template <class Registers>
  DFLASH_HD Registers lane_registers() const {
    return Registers{};
  }
  template <class Registers, class Body>
  DFLASH_HD void warp_phase(Registers& own, Body&& body) const {
#ifdef __CUDA_ARCH__
    DeviceWarp<Registers> warp(own);
    body(warp);
    __syncthreads();
#else
    (void)own;
    (void)body;
#endif
  }
};

}  // namespace dflash
