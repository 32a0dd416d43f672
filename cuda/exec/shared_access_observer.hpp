// The host's view of where a warp program reads and writes shared memory, for the bank-conflict
// test of the tensor-core programs (tests/cuda/attention/test_attention_tc_banks.cpp; the log and
// the conflict count are harness/cuda/shared_bank_trace.hpp's). Those programs keep their shared
// tiles as raw bf16 bits and floats, so the accesses a warp step makes - every fragment load
// (mma_fragments.hpp) and every element a lane stores, reads or accumulates in shared memory -
// name the element through DFLASH_SHARED(element). On the device that is the expression itself,
// character for character; on the host it also calls the observer a test installed (none
// otherwise: one pointer test per access).
#pragma once

#include "common/hd.hpp"

namespace dflash {

using SharedAccessObserver = void (*)(const void* address);

// The observer the host calls for every announced access; null by default.
inline SharedAccessObserver& shared_access_observer() {
  static SharedAccessObserver observer = nullptr;
  return observer;
}

DFLASH_HD inline void observe_shared_access(const void* address) {
#if defined(__CUDA_ARCH__)
  (void)address;
#else
  if (const SharedAccessObserver observer = shared_access_observer()) observer(address);
#endif
}

// *at, announced as one access of the lane (a read or a write: what the caller does with it). Host
// code; warp programs write DFLASH_SHARED(element).
template <class T>
inline T& observed_shared(T* at) {
  observe_shared_access(at);
  return *at;
}

}  // namespace dflash

// The shared-memory element `element` (an lvalue), announced on the host. On the device it is
// `element` unchanged: the same access through a function's reference turned nvcc's shared-memory
// loads of the forward's Q fragments (through SharedCarver's pointer) into generic ones, 64 a thread
// by its PTX.
#if defined(__CUDA_ARCH__)
#define DFLASH_SHARED(element) (element)
#else
#define DFLASH_SHARED(element) (::dflash::observed_shared(&(element)))
#endif

namespace dflash {}  // namespace dflash
