#include "cuda/attention/kernels.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/exec/block_device.cuh"
#include "cuda/exec/warp_device.cuh"
#include "cuda/runtime/bf16_bits.hpp"
#include "cuda/runtime/check.hpp"

namespace dflash {
namespace {

template <class Storage>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_forward_kernel(AttentionProblem problem, AttentionOperands<Storage> in,
                             AttentionForwardOutputs<Storage> out) {
  extern __shared__ __align__(16) unsigned char shared[];
  DeviceBlockExec exec;
  attention_forward_block(exec, problem, in, out, shared, blockIdx.x);
}

template <class Storage>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_dq_kernel(AttentionProblem problem, AttentionOperands<Storage> in, AttentionGradients grads) {
  extern __shared__ __align__(16) unsigned char shared[];
  DeviceBlockExec exec;
  attention_dq_block(exec, problem, in, grads, shared, blockIdx.x);
}

template <class Storage>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_dkv_kernel(AttentionProblem problem, AttentionOperands<Storage> in, AttentionGradients grads) {
  extern __shared__ __align__(16) unsigned char shared[];
  DeviceBlockExec exec;
  attention_dkv_block(exec, problem, in, grads, shared, blockIdx.x);
}

__global__ void __launch_bounds__(kTcMaxWarps* kWarpLanes)
    attention_forward_tc_kernel(AttentionProblem problem, AttentionOperands<Bf16Bits> in,
                                AttentionForwardOutputs<Bf16Bits> out) {
  extern __shared__ __align__(16) unsigned char shared[];
  DeviceWarpExec exec;
  attention_forward_tc_block(exec, problem, in, out, shared, blockIdx.x);
}

__global__ void __launch_bounds__(kTcMaxWarps* kWarpLanes)
    attention_dq_tc_kernel(AttentionProblem problem, AttentionOperands<Bf16Bits> in, AttentionGradients grads) {
  extern __shared__ __align__(16) unsigned char shared[];
  DeviceWarpExec exec;
  attention_dq_tc_block(exec, problem, in, grads, shared, blockIdx.x);
}

__global__ void __launch_bounds__(kTcMaxWarps* kWarpLanes)
    attention_dkv_tc_kernel(AttentionProblem problem, AttentionOperands<Bf16Bits> in, AttentionGradients grads) {
  extern __shared__ __align__(16) unsigned char shared[];
  DeviceWarpExec exec;
  attention_dkv_tc_block(exec, problem, in, grads, shared, blockIdx.x);
}

void check_tiling(const AttentionTiling& tiling) {
  if (const char* problem = attention_tiling_problem(tiling)) {
    throw std::invalid_argument(std::string("DFlash attention tiling: ") + problem);
  }
}

// Grants `kernel` `bytes` of dynamic shared memory, or says why the device cannot.
template <class Kernel>
void allow_shared_memory(Kernel kernel, std::size_t bytes, const char* name) {
  int device = 0, limit = 0;
  DFLASH_CUDA_CHECK(cudaGetDevice(&device));
  DFLASH_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<std::size_t>(limit)) {
    throw std::invalid_argument(std::string("DFlash attention ") + name + " needs " + std::to_string(bytes) +
                                " B of shared memory per block; the device grants " + std::to_string(limit) +
                                " B (reduce key_tile or the query tile: nh/nkv x B rows of d)");
  }
  DFLASH_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

template <class Storage>
void launch_attention_forward(const AttentionProblem& problem, const AttentionOperands<Storage>& in,
                              const AttentionForwardOutputs<Storage>& out, cudaStream_t stream) {
  check_tiling(problem.tiling);
  const std::size_t bytes = attention_forward_shared_bytes<Storage>(problem.tiling);
  allow_shared_memory(attention_forward_kernel<Storage>, bytes, "forward");
  attention_forward_kernel<Storage>
      <<<static_cast<unsigned>(problem.tiling.query_tiles()), kAttentionThreads, bytes, stream>>>(problem, in, out);
  DFLASH_CUDA_CHECK_LAUNCH("attention_forward_kernel");
}

void launch_attention_forward_tensor_cores(const AttentionProblem& problem, const AttentionOperands<Bf16Bits>& in,
                                           const AttentionForwardOutputs<Bf16Bits>& out, cudaStream_t stream) {
  if (const char* why = attention_tensor_core_problem(problem.tiling)) {
    throw std::invalid_argument(std::string("DFlash tensor-core attention tiling: ") + why);
  }
  const std::size_t bytes = attention_forward_tc_shared_bytes(problem.tiling);
  allow_shared_memory(attention_forward_tc_kernel, bytes, "tensor-core forward");
  attention_forward_tc_kernel<<<static_cast<unsigned>(problem.tiling.query_tiles()),
                                static_cast<unsigned>(tc_forward_threads(problem.tiling)), bytes, stream>>>(problem, in,
                                                                                                            out);
  DFLASH_CUDA_CHECK_LAUNCH("attention_forward_tc_kernel");
}

template <class Storage>
void launch_attention_backward(const AttentionProblem& problem, const AttentionOperands<Storage>& in,
                               const AttentionGradients& grads, cudaStream_t stream) {
  check_tiling(problem.tiling);
  const std::size_t dq_bytes = attention_dq_shared_bytes<Storage>(problem.tiling);
  allow_shared_memory(attention_dq_kernel<Storage>, dq_bytes, "dq");
  attention_dq_kernel<Storage>
      <<<static_cast<unsigned>(problem.tiling.query_tiles()), kAttentionThreads, dq_bytes, stream>>>(problem, in,
                                                                                                     grads);
  DFLASH_CUDA_CHECK_LAUNCH("attention_dq_kernel");
  const std::int64_t dkv_blocks = problem.tiling.context_tiles() * problem.tiling.nkv;
  if (dkv_blocks == 0) return;  // S = 0: no context keys
  const std::size_t dkv_bytes = attention_dkv_shared_bytes<Storage>(problem.tiling);
  allow_shared_memory(attention_dkv_kernel<Storage>, dkv_bytes, "dkv");
  attention_dkv_kernel<Storage>
      <<<static_cast<unsigned>(dkv_blocks), kAttentionThreads, dkv_bytes, stream>>>(problem, in, grads);
  DFLASH_CUDA_CHECK_LAUNCH("attention_dkv_kernel");
}

void launch_attention_backward_tensor_cores(const AttentionProblem& problem, const AttentionOperands<Bf16Bits>& in,
                                            const AttentionGradients& grads, cudaStream_t stream) {
  const AttentionTiling& tl = problem.tiling;
  if (const char* why = attention_tensor_core_problem(tl)) {
    throw std::invalid_argument(std::string("DFlash tensor-core attention tiling: ") + why);
  }
  const auto threads = static_cast<unsigned>(tc_forward_threads(tl));
  const std::size_t dq_bytes = attention_dq_tc_shared_bytes(tl);
  allow_shared_memory(attention_dq_tc_kernel, dq_bytes, "tensor-core dq");
  attention_dq_tc_kernel<<<static_cast<unsigned>(tl.query_tiles()), threads, dq_bytes, stream>>>(problem, in, grads);
  DFLASH_CUDA_CHECK_LAUNCH("attention_dq_tc_kernel");
  const std::int64_t dkv_blocks = tl.context_tiles() * tl.nkv;
  if (dkv_blocks == 0) return;  // S = 0: no context keys
  const std::size_t dkv_bytes = attention_dkv_tc_shared_bytes(tl);
  allow_shared_memory(attention_dkv_tc_kernel, dkv_bytes, "tensor-core dkv");
  attention_dkv_tc_kernel<<<static_cast<unsigned>(dkv_blocks), threads, dkv_bytes, stream>>>(problem, in, grads);
  DFLASH_CUDA_CHECK_LAUNCH("attention_dkv_tc_kernel");
}

template void launch_attention_forward<float>(const AttentionProblem&, const AttentionOperands<float>&,
                                              const AttentionForwardOutputs<float>&, cudaStream_t);
template void launch_attention_forward<Bf16Bits>(const AttentionProblem&, const AttentionOperands<Bf16Bits>&,
                                                 const AttentionForwardOutputs<Bf16Bits>&, cudaStream_t);
template void launch_attention_backward<float>(const AttentionProblem&, const AttentionOperands<float>&,
                                               const AttentionGradients&, cudaStream_t);
template void launch_attention_backward<Bf16Bits>(const AttentionProblem&, const AttentionOperands<Bf16Bits>&,
                                                  const AttentionGradients&, cudaStream_t);

}  // namespace dflash
