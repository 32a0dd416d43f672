#include "cuda/loss_head/row_kernels.hpp"

#include <cstdint>
#include <new>

#include "common/bf16.hpp"
#include "common/row_stats.hpp"
#include "cuda/exec/block_device.cuh"
#include "cuda/loss_head/row_gather_program.hpp"
#include "cuda/runtime/check.hpp"
#include "io/errors.hpp"

namespace dflash {
namespace {

constexpr int kFlatThreads = 256;

// A block's shared array of N values of a type with member initialisers (which a __shared__
// declaration cannot hold): raw bytes, each thread constructing its own slot.
template <class T, int N>
__device__ inline T* shared_slots() {
  __shared__ alignas(T) unsigned char raw[N * sizeof(T)];
  return reinterpret_cast<T*>(raw);
}

// The row kernels run their block programs (row_program.hpp). Block r: compact row r of the chunk,
// global row list[r] (valid).
__global__ void __launch_bounds__(kRowThreads)
    hybrid_row_stats_kernel(const Bf16Bits* __restrict__ z, const Bf16Bits* __restrict__ t, std::int32_t vocab,
                            const std::int32_t* __restrict__ list, DeviceRowTargets in, HybridWeights hw,
                            DeviceRowOutputs out, bool vector) {
  DeviceBlockExec exec;
  hybrid_row_stats_program(exec, z, t, vocab, list, in, hw, out, vector, shared_slots<KernelRowStats, kRowThreads>(),
                           blockIdx.x);
}

__global__ void __launch_bounds__(kRowThreads)
    hybrid_logit_grad_kernel(Bf16Bits* __restrict__ z, const Bf16Bits* __restrict__ t, std::int32_t vocab,
                             const std::int32_t* __restrict__ list, DeviceRowTargets in, HybridWeights hw,
                             const float* __restrict__ row_stats, float weight_sum, bool vector) {
  DeviceBlockExec exec;
  hybrid_logit_grad_program(exec, z, t, vocab, list, in, hw, row_stats, weight_sum, vector, blockIdx.x);
}

__global__ void __launch_bounds__(kCompactThreads)
    compact_valid_rows_kernel(const std::uint8_t* __restrict__ valid, std::int64_t T, std::int32_t* __restrict__ list,
                              std::int32_t* __restrict__ count) {
  __shared__ std::int32_t offsets[kCompactThreads];
  DeviceBlockExec exec;
  compact_valid_rows_program(exec, valid, T, offsets, list, count);
}

template <ListedRows kDirection, class T>
__global__ void __launch_bounds__(kGatherThreads)
    copy_listed_rows_kernel(const T* __restrict__ src, const std::int32_t* __restrict__ list, std::int32_t cols,
                            T* __restrict__ dst) {
  DeviceBlockExec exec;
  copy_listed_row_program<kDirection>(exec, src, list, blockIdx.x, cols, dst);
}

__global__ void __launch_bounds__(kTotalsThreads)
    loss_totals_kernel(DeviceRowOutputs rows_out, DeviceRowTargets in, std::int64_t T, LossHeadStats<double>* totals) {
  DeviceBlockExec exec;
  loss_totals_program(exec, rows_out, in, T, shared_slots<LossHeadStats<double>, kTotalsThreads>(), totals);
}

__global__ void find_row_target_faults_kernel(DeviceRowTargets in, std::int64_t T, std::int64_t vocab,
                                              RowTargetFaults* faults) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < T;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const auto row = static_cast<unsigned long long>(i);
    const RowTargetFlags f = row_target_faults_of(in, i, vocab);
    if (f.valid_not_01) atomicMin(&faults->valid_not_01, row);
    if (f.bad_weight) atomicMin(&faults->bad_weight, row);
    if (f.weight_on_invalid) atomicMin(&faults->weight_on_invalid, row);
    if (f.label_out_of_range) atomicMin(&faults->label_out_of_range, row);
    if (f.positive_weight) atomicMin(&faults->positive_weight, row);
  }
}

template <bool kVector>
__global__ void find_non_finite_bf16_kernel(const Bf16Bits* __restrict__ x, std::int64_t rows, std::int64_t cols,
                                            const std::uint8_t* __restrict__ row_mask, unsigned long long* first) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  const std::int64_t start = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if constexpr (kVector) {  // 16-byte loads; a group of 8 never straddles two rows
    const uint4* x8 = reinterpret_cast<const uint4*>(x);
    for (std::int64_t g = start; g < rows * cols / 8; g += stride) {
      if (row_mask != nullptr && row_mask[g * 8 / cols] == 0) continue;
      const uint4 p = x8[g];
      const unsigned int words[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (bf16_bits_non_finite(k % 2 == 0 ? words[k / 2] & 0xFFFFu : words[k / 2] >> 16)) {
          atomicMin(first, static_cast<unsigned long long>(8 * g + k));
        }
      }
    }
  } else {
    for (std::int64_t e = start; e < rows * cols; e += stride) {
      if (row_mask != nullptr && row_mask[e / cols] == 0) continue;
      if (bf16_bits_non_finite(x[e])) atomicMin(first, static_cast<unsigned long long>(e));
    }
  }
}

// One block per chunk row (a grid's x dimension holds 2^31 - 1 blocks).
unsigned int row_blocks(std::int64_t rows) {
  if (rows > 0x7FFFFFFF) throw_input_error("rows", str(rows, " exceed one grid's 2^31 - 1 blocks"));
  return static_cast<unsigned int>(rows);
}

// Column indices are 32-bit in the row kernels (and in the gather/scatter of [., H] rows).
std::int32_t column_count(std::int64_t vocab, const char* name = "vocab_size") {
  if (vocab > 0x7FFFFFFF) throw_input_error(name, str(vocab, " does not fit the kernels' 32-bit column index"));
  return static_cast<std::int32_t>(vocab);
}

unsigned int flat_blocks(std::int64_t work_items) {
  const std::int64_t blocks = (work_items + kFlatThreads - 1) / kFlatThreads;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks));
}

}  // namespace

void launch_hybrid_row_stats(const Bf16Bits* z, const Bf16Bits* t, std::int64_t rows, std::int64_t vocab,
                             const std::int32_t* list, DeviceRowTargets targets, HybridWeights weights,
                             DeviceRowOutputs out, cudaStream_t stream) {
  if (rows == 0) return;
  hybrid_row_stats_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(
      z, t, column_count(vocab), list, targets, weights, out, rows_take_vector_path(z, t, vocab));
  DFLASH_CUDA_CHECK_LAUNCH("hybrid_row_stats_kernel");
}

void launch_hybrid_logit_grad(Bf16Bits* z, const Bf16Bits* t, std::int64_t rows, std::int64_t vocab,
                              const std::int32_t* list, DeviceRowTargets targets, HybridWeights weights,
                              const float* row_stats, float weight_sum, cudaStream_t stream) {
  if (rows == 0) return;
  hybrid_logit_grad_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(
      z, t, column_count(vocab), list, targets, weights, row_stats, weight_sum, rows_take_vector_path(z, t, vocab));
  DFLASH_CUDA_CHECK_LAUNCH("hybrid_logit_grad_kernel");
}

void launch_compact_valid_rows(const std::uint8_t* valid, std::int64_t T, std::int32_t* list, std::int32_t* count,
                               cudaStream_t stream) {
  if (T > 0x7FFFFFFF) throw_input_error("rows", str(T, " do not fit the 32-bit row list"));
  compact_valid_rows_kernel<<<1, kCompactThreads, 0, stream>>>(valid, T, list, count);
  DFLASH_CUDA_CHECK_LAUNCH("compact_valid_rows_kernel");
}

void launch_gather_rows(const Bf16Bits* src, const std::int32_t* list, std::int64_t rows, std::int64_t cols,
                        Bf16Bits* dst, cudaStream_t stream) {
  if (rows == 0) return;
  copy_listed_rows_kernel<ListedRows::gather>
      <<<row_blocks(rows), kGatherThreads, 0, stream>>>(src, list, column_count(cols, "hidden_size"), dst);
  DFLASH_CUDA_CHECK_LAUNCH("copy_listed_rows_kernel (gather)");
}

void launch_scatter_rows(const float* src, const std::int32_t* list, std::int64_t rows, std::int64_t cols, float* dst,
                         cudaStream_t stream) {
  if (rows == 0) return;
  copy_listed_rows_kernel<ListedRows::scatter>
      <<<row_blocks(rows), kGatherThreads, 0, stream>>>(src, list, column_count(cols, "hidden_size"), dst);
  DFLASH_CUDA_CHECK_LAUNCH("copy_listed_rows_kernel (scatter)");
}

void launch_loss_totals(const DeviceRowOutputs& rows_out, DeviceRowTargets targets, std::int64_t T,
                        LossHeadStats<double>* totals, cudaStream_t stream) {
  loss_totals_kernel<<<1, kTotalsThreads, 0, stream>>>(rows_out, targets, T, totals);
  DFLASH_CUDA_CHECK_LAUNCH("loss_totals_kernel");
}

void launch_find_row_target_faults(DeviceRowTargets targets, std::int64_t T, std::int64_t vocab,
                                   RowTargetFaults* faults, cudaStream_t stream) {
  if (T == 0) return;
  find_row_target_faults_kernel<<<flat_blocks(T), kFlatThreads, 0, stream>>>(targets, T, vocab, faults);
  DFLASH_CUDA_CHECK_LAUNCH("find_row_target_faults_kernel");
}

void launch_find_non_finite_bf16(const Bf16Bits* x, std::int64_t rows, std::int64_t cols, const std::uint8_t* row_mask,
                                 unsigned long long* first, cudaStream_t stream) {
  if (rows * cols == 0) return;
  // The caller's pointer may be a view: 16-byte loads only when it is aligned for them.
  if (cols % 8 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0) {
    find_non_finite_bf16_kernel<true>
        <<<flat_blocks(rows * cols / 8), kFlatThreads, 0, stream>>>(x, rows, cols, row_mask, first);
  } else {
    find_non_finite_bf16_kernel<false>
        <<<flat_blocks(rows * cols), kFlatThreads, 0, stream>>>(x, rows, cols, row_mask, first);
  }
  DFLASH_CUDA_CHECK_LAUNCH("find_non_finite_bf16_kernel");
}

}  // namespace dflash
