#include "cuda/loss_head_kernels.hpp"

#include <cstdint>
#include <new>

#include "common/bf16.hpp"
#include "common/row_stats.hpp"
#include "cuda/cuda_check.hpp"

namespace dflash {
namespace {

constexpr int kRowThreads = 256;  // one block per row; V / 256 columns per thread
constexpr int kFlatThreads = 256;
constexpr int kTotalsThreads = 512;

// Eight bf16 columns in one 16-byte load (the vector path needs V % 8 == 0, so that every row
// starts 16-byte aligned).
struct Bf16x8 {
  float v[8];
};

__device__ inline Bf16x8 widen8(const uint4& packed) {
  const unsigned int words[4] = {packed.x, packed.y, packed.z, packed.w};
  Bf16x8 out;
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // little-endian: column 2k is the low half of word k
    out.v[2 * k] = float_from_bf16_bits(static_cast<Bf16Bits>(words[k] & 0xFFFFu));
    out.v[2 * k + 1] = float_from_bf16_bits(static_cast<Bf16Bits>(words[k] >> 16));
  }
  return out;
}

__device__ inline uint4 narrow8(const Bf16x8& values) {
  unsigned int words[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    words[k] = static_cast<unsigned int>(bf16_bits_from_float(values.v[2 * k])) |
               (static_cast<unsigned int>(bf16_bits_from_float(values.v[2 * k + 1])) << 16);
  }
  return uint4{words[0], words[1], words[2], words[3]};
}

// A block's shared array of N values of a type with member initialisers (which a __shared__
// declaration cannot hold): raw bytes, each thread constructing its own slot.
template <class T, int N>
__device__ inline T* shared_slots() {
  __shared__ alignas(T) unsigned char raw[N * sizeof(T)];
  return reinterpret_cast<T*>(raw);
}

// Merges every thread's partial statistics into thread 0's, in a fixed tree (bitwise
// reproducible).
__device__ inline HybridRowStats<float> block_merge(const HybridRowStats<float>& mine) {
  HybridRowStats<float>* partial = shared_slots<HybridRowStats<float>, kRowThreads>();
  new (&partial[threadIdx.x]) HybridRowStats<float>(mine);
  __syncthreads();
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      partial[threadIdx.x] = HybridRowStats<float>::merge(partial[threadIdx.x], partial[threadIdx.x + half]);
    }
    __syncthreads();
  }
  return partial[0];
}

template <bool kVector>
__global__ void __launch_bounds__(kRowThreads)
    hybrid_row_stats_kernel(const Bf16Bits* __restrict__ z, const Bf16Bits* __restrict__ t, std::int64_t vocab,
                            std::int64_t row0, DeviceRowTargets in, HybridWeights hw, DeviceRowOutputs out) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t i = row0 + r;
  if (in.valid[i] == 0) {  // no label, no teacher: outputs are 0 and nothing else is read
    if (threadIdx.x == 0) {
      for (int k = 0; k < 3; ++k) out.row_stats[3 * i + k] = 0.0f;
      out.lse[i] = out.token_loss[i] = out.ce[i] = out.kl[i] = 0.0f;
      out.correct[i] = 0;
    }
    return;
  }
  const std::int64_t label = in.labels[i];
  const Bf16Bits* zr = z + r * vocab;
  const Bf16Bits* tr = t + r * vocab;
  HybridRowStats<float> stats;
  if constexpr (kVector) {
    const uint4* z8 = reinterpret_cast<const uint4*>(zr);
    const uint4* t8 = reinterpret_cast<const uint4*>(tr);
    for (std::int64_t g = threadIdx.x; g < vocab / 8; g += kRowThreads) {
      const Bf16x8 zv = widen8(z8[g]);
      const Bf16x8 tv = widen8(t8[g]);
#pragma unroll
      for (int k = 0; k < 8; ++k) stats.update(zv.v[k], tv.v[k], 8 * g + k, label, hw.tau);
    }
  } else {
    for (std::int64_t v = threadIdx.x; v < vocab; v += kRowThreads) {
      stats.update(float_from_bf16_bits(zr[v]), float_from_bf16_bits(tr[v]), v, label, hw.tau);
    }
  }
  const HybridRowStats<float> all = block_merge(stats);
  if (threadIdx.x == 0) {
    const HybridRowResult<float> row = finish_row(all, hw.tau);
    out.row_stats[3 * i] = row.lse_z;
    out.row_stats[3 * i + 1] = row.lse_zt;
    out.row_stats[3 * i + 2] = row.lse_tt;
    out.lse[i] = row.lse_z;
    out.token_loss[i] = hw.hard * row.ce + hw.soft * hw.tau * hw.tau * row.kl;
    out.ce[i] = row.ce;
    out.kl[i] = row.kl;
    out.correct[i] = all.argmax == label ? 1 : 0;
  }
}

template <bool kVector>
__global__ void __launch_bounds__(kRowThreads)
    hybrid_logit_grad_kernel(Bf16Bits* __restrict__ z, const Bf16Bits* __restrict__ t, std::int64_t vocab,
                             std::int64_t row0, DeviceRowTargets in, HybridWeights hw,
                             const float* __restrict__ row_stats, float weight_sum) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t i = row0 + r;
  Bf16Bits* zr = z + r * vocab;
  const Bf16Bits* tr = t + r * vocab;
  const float scale = in.valid[i] != 0 && weight_sum > 0.0f ? in.weights[i] / weight_sum : 0.0f;
  if (scale == 0.0f) {  // invalid, zero-weight, or W = 0: the row's gradient is exactly zero
    for (std::int64_t v = threadIdx.x; v < vocab; v += kRowThreads) zr[v] = 0;
    return;
  }
  const std::int64_t label = in.labels[i];
  HybridRowResult<float> row{};
  row.lse_z = row_stats[3 * i];
  row.lse_zt = row_stats[3 * i + 1];
  row.lse_tt = row_stats[3 * i + 2];
  auto grad = [&](float zv, float tv, std::int64_t v) {
    return hybrid_logit_grad(zv, teacher_log_prob(tv, row, hw.tau), v == label, row, hw.tau, hw.hard, hw.soft, scale);
  };
  if constexpr (kVector) {
    uint4* z8 = reinterpret_cast<uint4*>(zr);
    const uint4* t8 = reinterpret_cast<const uint4*>(tr);
    for (std::int64_t g = threadIdx.x; g < vocab / 8; g += kRowThreads) {
      Bf16x8 zv = widen8(z8[g]);
      const Bf16x8 tv = widen8(t8[g]);
#pragma unroll
      for (int k = 0; k < 8; ++k) zv.v[k] = grad(zv.v[k], tv.v[k], 8 * g + k);
      z8[g] = narrow8(zv);
    }
  } else {
    for (std::int64_t v = threadIdx.x; v < vocab; v += kRowThreads) {
      zr[v] = bf16_bits_from_float(grad(float_from_bf16_bits(zr[v]), float_from_bf16_bits(tr[v]), v));
    }
  }
}

__global__ void __launch_bounds__(kTotalsThreads)
    loss_totals_kernel(DeviceRowOutputs rows_out, DeviceRowTargets in, std::int64_t T, LossTotals* totals) {
  LossTotals mine;
  for (std::int64_t i = threadIdx.x; i < T; i += kTotalsThreads) {
    if (in.valid[i] == 0) continue;
    const double w = in.weights[i];
    mine.weighted_loss += w * rows_out.token_loss[i];
    mine.weighted_ce += w * rows_out.ce[i];
    mine.weighted_kl += w * rows_out.kl[i];
    mine.weighted_magnitude += w * (fabs(double(rows_out.row_stats[3 * i])) + fabs(double(rows_out.row_stats[3 * i + 1])) +
                                    fabs(double(rows_out.row_stats[3 * i + 2])));
    mine.correct += rows_out.correct[i];
    mine.valid_rows += 1;
  }
  LossTotals* partial = shared_slots<LossTotals, kTotalsThreads>();
  new (&partial[threadIdx.x]) LossTotals(mine);
  __syncthreads();
  for (int half = kTotalsThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      LossTotals& a = partial[threadIdx.x];
      const LossTotals& b = partial[threadIdx.x + half];
      a.weighted_loss += b.weighted_loss;
      a.weighted_ce += b.weighted_ce;
      a.weighted_kl += b.weighted_kl;
      a.weighted_magnitude += b.weighted_magnitude;
      a.correct += b.correct;
      a.valid_rows += b.valid_rows;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *totals = partial[0];
}

__global__ void find_row_target_faults_kernel(DeviceRowTargets in, std::int64_t T, std::int64_t vocab,
                                              RowTargetFaults* faults) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < T;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const auto row = static_cast<unsigned long long>(i);
    const std::uint8_t valid = in.valid[i];
    const float w = in.weights[i];
    if (valid > 1) atomicMin(&faults->valid_not_01, row);
    if (!isfinite(w) || w < 0.0f) atomicMin(&faults->bad_weight, row);
    if (valid == 0 && w != 0.0f) atomicMin(&faults->weight_on_invalid, row);
    if (valid == 1 && (in.labels[i] < 0 || in.labels[i] >= vocab)) atomicMin(&faults->label_out_of_range, row);
    if (w > 0.0f) atomicMin(&faults->positive_weight, row);
  }
}

__device__ inline bool bf16_non_finite(unsigned int bits16) { return (bits16 & 0x7F80u) == 0x7F80u; }

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
        if (bf16_non_finite(k % 2 == 0 ? words[k / 2] & 0xFFFFu : words[k / 2] >> 16)) {
          atomicMin(first, static_cast<unsigned long long>(8 * g + k));
        }
      }
    }
  } else {
    for (std::int64_t e = start; e < rows * cols; e += stride) {
      if (row_mask != nullptr && row_mask[e / cols] == 0) continue;
      if (bf16_non_finite(x[e])) atomicMin(first, static_cast<unsigned long long>(e));
    }
  }
}

// The 16-byte path needs every row of both operands to start 16-byte aligned.
bool vector_rows(const Bf16Bits* z, const Bf16Bits* t, std::int64_t vocab) {
  return vocab % 8 == 0 && reinterpret_cast<std::uintptr_t>(z) % 16 == 0 && reinterpret_cast<std::uintptr_t>(t) % 16 == 0;
}

unsigned int flat_blocks(std::int64_t work_items) {
  const std::int64_t blocks = (work_items + kFlatThreads - 1) / kFlatThreads;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks));
}

}  // namespace

void launch_hybrid_row_stats(const Bf16Bits* z, const Bf16Bits* t, std::int64_t rows, std::int64_t vocab,
                             std::int64_t row0, DeviceRowTargets targets, HybridWeights weights,
                             DeviceRowOutputs out, cudaStream_t stream) {
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned int>(rows));
  if (vector_rows(z, t, vocab)) {
    hybrid_row_stats_kernel<true><<<grid, kRowThreads, 0, stream>>>(z, t, vocab, row0, targets, weights, out);
  } else {
    hybrid_row_stats_kernel<false><<<grid, kRowThreads, 0, stream>>>(z, t, vocab, row0, targets, weights, out);
  }
  DFLASH_CUDA_CHECK_LAUNCH("hybrid_row_stats_kernel");
}

void launch_hybrid_logit_grad(Bf16Bits* z, const Bf16Bits* t, std::int64_t rows, std::int64_t vocab,
                              std::int64_t row0, DeviceRowTargets targets, HybridWeights weights,
                              const float* row_stats, float weight_sum, cudaStream_t stream) {
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned int>(rows));
  if (vector_rows(z, t, vocab)) {
    hybrid_logit_grad_kernel<true><<<grid, kRowThreads, 0, stream>>>(z, t, vocab, row0, targets, weights, row_stats,
                                                                     weight_sum);
  } else {
    hybrid_logit_grad_kernel<false><<<grid, kRowThreads, 0, stream>>>(z, t, vocab, row0, targets, weights, row_stats,
                                                                      weight_sum);
  }
  DFLASH_CUDA_CHECK_LAUNCH("hybrid_logit_grad_kernel");
}

void launch_loss_totals(const DeviceRowOutputs& rows_out, DeviceRowTargets targets, std::int64_t T,
                        LossTotals* totals, cudaStream_t stream) {
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
    find_non_finite_bf16_kernel<true><<<flat_blocks(rows * cols / 8), kFlatThreads, 0, stream>>>(x, rows, cols, row_mask,
                                                                                                 first);
  } else {
    find_non_finite_bf16_kernel<false><<<flat_blocks(rows * cols), kFlatThreads, 0, stream>>>(x, rows, cols, row_mask,
                                                                                              first);
  }
  DFLASH_CUDA_CHECK_LAUNCH("find_non_finite_bf16_kernel");
}

cudaError_t loss_head_kernel_image_status() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, hybrid_row_stats_kernel<true>);
}

}  // namespace dflash
