// The host's view of where a warp program reads and writes shared memory, for the tests of the
// tensor-core programs (tests/cuda/attention/test_attention_tc_banks.cpp). Those programs keep
// their shared tiles as raw bf16 bits and floats, so the accesses that matter - every fragment load
// (mma_fragments.hpp) and every element a lane stores, reads or accumulates in shared memory -
// name the element through DFLASH_SHARED(element). On the device that is the expression itself,
// character for character; on the host it goes through the observer a test installed (none
// otherwise: one pointer test per access), which notes the address (the bank-conflict count:
// harness/cuda/shared_bank_trace.hpp) or moves it (harness/cuda/shared_mediation.hpp: proof that no
// warp step reaches shared memory any other way).
#pragma once

#include <type_traits>

namespace dflash {

// Called with the address of every announced access; returns the address the access is to use
// (the same one, unless a test keeps the block's memory elsewhere during a warp step).
using SharedAccessObserver = void* (*)(void* address);

// The observer the host calls for every announced access; null by default.
inline SharedAccessObserver& shared_access_observer() {
  static SharedAccessObserver observer = nullptr;
  return observer;
}

// *at, announced as one access of the lane (a read or a write: what the caller does with it). Host
// code; warp programs write DFLASH_SHARED(element).
template <class T>
inline T& observed_shared(T* at) {
  void* address = const_cast<std::remove_const_t<T>*>(at);
  if (const SharedAccessObserver observer = shared_access_observer()) address = observer(address);
  return *static_cast<T*>(address);
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
