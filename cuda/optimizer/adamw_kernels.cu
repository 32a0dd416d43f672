#include "cuda/optimizer/adamw_kernels.hpp"

#include <stdexcept>
#include <string>

#include "cuda/exec/block_device.cuh"
#include "cuda/runtime/check.hpp"

namespace dflash {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("optimizer kernel: " + what);
}

__global__ void squared_norm_partials_kernel(const float* g, std::int64_t n, std::int64_t blocks, double* partials) {
  __shared__ double shared[kOptimizerThreads];
  DeviceBlockExec exec;
  squared_norm_block_program(exec, shared, g, n, blocks, blockIdx.x, partials);
}

__global__ void squared_norm_finish_kernel(const double* partials, std::int64_t blocks, double* norm2) {
  *norm2 = squared_norm_of_partials(partials, blocks);
}

__global__ void adamw_step_kernel(AdamWRange range) {
  DeviceBlockExec exec;
  elementwise_block_program(exec, range.end - range.begin, gridDim.x, blockIdx.x,
                            [&](std::int64_t i) { adamw_step_at(i, range); });
}

__global__ void bf16_copy_kernel(const float* master, std::int64_t n, std::uint16_t* working) {
  DeviceBlockExec exec;
  elementwise_block_program(exec, n, gridDim.x, blockIdx.x, [&](std::int64_t i) { bf16_copy_at(i, master, working); });
}

}  // namespace

void launch_squared_norm_partials(const float* g, std::int64_t n, double* partials, cudaStream_t stream) {
  require(n >= 0, "norm size " + std::to_string(n));
  const std::int64_t blocks = norm_blocks(n);
  squared_norm_partials_kernel<<<unsigned(blocks), kOptimizerThreads, 0, stream>>>(g, n, blocks, partials);
  DFLASH_CUDA_CHECK_LAUNCH("squared_norm_partials_kernel");
}

void launch_squared_norm_finish(const double* partials, std::int64_t blocks, double* norm2, cudaStream_t stream) {
  require(blocks >= 1 && blocks <= kNormMaxBlocks, "norm partial count " + std::to_string(blocks));
  squared_norm_finish_kernel<<<1, 1, 0, stream>>>(partials, blocks, norm2);
  DFLASH_CUDA_CHECK_LAUNCH("squared_norm_finish_kernel");
}

void launch_adamw_step(const AdamWRange& range, cudaStream_t stream) {
  require(range.begin >= 0 && range.end >= range.begin,
          "AdamW range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) + ")");
  require(range.table.count >= 1, "AdamW decay table count " + std::to_string(range.table.count));
  const std::int64_t blocks = elementwise_blocks(range.end - range.begin);
  adamw_step_kernel<<<unsigned(blocks), kOptimizerThreads, 0, stream>>>(range);
  DFLASH_CUDA_CHECK_LAUNCH("adamw_step_kernel");
}

void launch_bf16_copy(const float* master, std::int64_t n, std::uint16_t* working, cudaStream_t stream) {
  require(n >= 0, "bf16 copy size " + std::to_string(n));
  const std::int64_t blocks = elementwise_blocks(n);
  bf16_copy_kernel<<<unsigned(blocks), kOptimizerThreads, 0, stream>>>(master, n, working);
  DFLASH_CUDA_CHECK_LAUNCH("bf16_copy_kernel");
}

}  // namespace dflash
