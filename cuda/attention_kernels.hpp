// The DFlash attention kernels (cuda/attention_program.hpp on the GPU), behind launchers that
// host-compiler code can call. Storage is bf16 bits (production) or float (tests); every pointer
// in the problem and the operands is a device pointer.
//   forward:  grid N nkv query tiles -> O, lse
//   backward: the dq kernel (grid N nkv: dQ, block-key dK/dV, delta), then the dkv kernel
//             (grid ceil(S/KT) nkv: context dK/dV); stream-ordered, no atomics, every gradient
//             element written once (the outputs need no zeroing).
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "cuda/attention_program.hpp"

namespace dflash {

// Throws std::invalid_argument naming the field when the tiling cannot run, or when a program's
// shared memory exceeds what the current device grants one block.
template <class Storage>
void launch_attention_forward(const AttentionProblem& problem, const AttentionOperands<Storage>& in,
                              const AttentionForwardOutputs<Storage>& out, cudaStream_t stream);

// in.out, in.d_out and in.lse must be set; grads.delta is [T, nh] fp32 scratch.
template <class Storage>
void launch_attention_backward(const AttentionProblem& problem, const AttentionOperands<Storage>& in,
                               const AttentionGradients& grads, cudaStream_t stream);

}  // namespace dflash
