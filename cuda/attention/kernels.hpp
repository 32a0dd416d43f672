// The DFlash attention kernels (cuda/attention/simt_program.hpp on the GPU), behind launchers that
// host-compiler code can call. Storage is bf16 bits (production) or float (tests); every pointer
// in the problem and the operands is a device pointer.
//   forward:  grid N nkv query tiles -> O, lse
//   backward: the dq kernel (grid N nkv: dQ, block-key dK/dV, delta), then the dkv kernel
//             (grid ceil(S/KT) nkv: context dK/dV); stream-ordered, no atomics, every gradient
//             element written once (the outputs need no zeroing).
//   forward on tensor cores (cuda/attention/tensor_core_program.hpp): the same outputs, bf16 storage and
//             the shapes attention_tensor_core_problem accepts; the caller picks the kernel with
//             AttentionForwardKernel (the selection rule: attention_forward_uses_tensor_cores).
//   backward on tensor cores (cuda/attention/tensor_core_backward_program.hpp): the dq then the dkv
//             kernel on mma, the same grids and outputs, the same restrictions; the caller picks
//             with AttentionBackwardKernel (attention_backward_uses_tensor_cores).
#pragma once

#include <cstddef>
#include <type_traits>

#include <cuda_runtime_api.h>

#include "cuda/attention/simt_program.hpp"
#include "cuda/attention/tensor_core_backward_program.hpp"
#include "cuda/attention/tensor_core_program.hpp"

namespace dflash {

// Throws std::invalid_argument naming the field when the tiling cannot run, or when a program's
// shared memory exceeds what the current device grants one block.
template <class Storage>
void launch_attention_forward(const AttentionProblem& problem, const AttentionOperands<Storage>& in,
                              const AttentionForwardOutputs<Storage>& out, cudaStream_t stream);

// The forward on tensor cores; throws std::invalid_argument naming the field when the tiling is
// not one it supports (attention_tensor_core_problem).
void launch_attention_forward_tensor_cores(const AttentionProblem& problem, const AttentionOperands<Bf16Bits>& in,
                                           const AttentionForwardOutputs<Bf16Bits>& out, cudaStream_t stream);

// The forward `kernel` selects (AttentionForwardKernel, cuda/attention/tensor_core_program.hpp).
template <class Storage>
void launch_attention_forward(const AttentionProblem& problem, const AttentionOperands<Storage>& in,
                              const AttentionForwardOutputs<Storage>& out, cudaStream_t stream,
                              AttentionForwardKernel kernel) {
  if constexpr (std::is_same_v<Storage, Bf16Bits>) {
    if (kernel == AttentionForwardKernel::tensor_cores_where_supported &&
        attention_forward_uses_tensor_cores<Storage>(problem.tiling)) {
      launch_attention_forward_tensor_cores(problem, in, out, stream);
      return;
    }
  }
  launch_attention_forward(problem, in, out, stream);
}

// in.out, in.d_out and in.lse must be set; grads.delta is [T, nh] fp32 scratch.
template <class Storage>
void launch_attention_backward(const AttentionProblem& problem, const AttentionOperands<Storage>& in,
                               const AttentionGradients& grads, cudaStream_t stream);

// The backward on tensor cores (same operands and outputs); throws std::invalid_argument naming
// the field when the tiling is not one it supports (attention_tensor_core_problem).
void launch_attention_backward_tensor_cores(const AttentionProblem& problem, const AttentionOperands<Bf16Bits>& in,
                                            const AttentionGradients& grads, cudaStream_t stream);

// The backward `kernel` selects (AttentionBackwardKernel, cuda/attention/tensor_core_backward_program.hpp).
template <class Storage>
void launch_attention_backward(const AttentionProblem& problem, const AttentionOperands<Storage>& in,
                               const AttentionGradients& grads, cudaStream_t stream, AttentionBackwardKernel kernel) {
  if constexpr (std::is_same_v<Storage, Bf16Bits>) {
    if (kernel == AttentionBackwardKernel::tensor_cores_where_supported &&
        attention_backward_uses_tensor_cores<Storage>(problem.tiling)) {
      launch_attention_backward_tensor_cores(problem, in, grads, stream);
      return;
    }
  }
  launch_attention_backward(problem, in, grads, stream);
}

}  // namespace dflash
