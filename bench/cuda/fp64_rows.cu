#include "bench/cuda/fp64_rows.hpp"

#include "common/bf16.hpp"
#include "cuda/runtime/check.hpp"
#include "io/errors.hpp"

namespace dflash {
namespace {

constexpr int kWarps = 8;  // per block of the logits kernel: one warp per vocabulary entry

// One warp per v: lane l takes h = l, l + 32, ...; the lanes' sums meet in a fixed shuffle tree.
__global__ void __launch_bounds__(32 * kWarps)
    fp64_row_logits_kernel(const Bf16Bits* __restrict__ y, const Bf16Bits* __restrict__ g,
                           const Bf16Bits* __restrict__ w, const std::int64_t* __restrict__ rows, int n, std::int64_t V,
                           std::int64_t H, double* __restrict__ z, double* __restrict__ t) {
  const std::int64_t v = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (v >= V) return;  // whole warps leave together
  double zs[kFp64MaxRows], ts[kFp64MaxRows];
  for (int j = 0; j < kFp64MaxRows; ++j) zs[j] = ts[j] = 0.0;
  const Bf16Bits* wv = w + v * H;
  for (std::int64_t h = lane; h < H; h += 32) {
    const double wh = float_from_bf16_bits(wv[h]);
#pragma unroll
    for (int j = 0; j < kFp64MaxRows; ++j) {
      if (j < n) {
        zs[j] += double(float_from_bf16_bits(y[rows[j] * H + h])) * wh;
        ts[j] += double(float_from_bf16_bits(g[rows[j] * H + h])) * wh;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kFp64MaxRows; ++j) {
    for (int offset = 16; offset > 0; offset /= 2) {
      zs[j] += __shfl_down_sync(0xFFFFFFFFu, zs[j], offset);
      ts[j] += __shfl_down_sync(0xFFFFFFFFu, ts[j], offset);
    }
    if (lane == 0 && j < n) {
      z[std::int64_t(j) * V + v] = zs[j];
      t[std::int64_t(j) * V + v] = ts[j];
    }
  }
}

// Thread per (h, segment): the segment's v in order, for every row; partial[segment][j][h].
__global__ void fp64_rows_times_head_kernel(const double* __restrict__ dz, const Bf16Bits* __restrict__ w, int n,
                                            std::int64_t V, std::int64_t H, double* __restrict__ partial) {
  const std::int64_t h = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t segment = blockIdx.y;
  if (h >= H) return;
  const std::int64_t per_segment = (V + kFp64Segments - 1) / kFp64Segments;
  const std::int64_t v0 = segment * per_segment, v1 = v0 + per_segment < V ? v0 + per_segment : V;
  double sums[kFp64MaxRows];
  for (int j = 0; j < kFp64MaxRows; ++j) sums[j] = 0.0;
  for (std::int64_t v = v0; v < v1; ++v) {
    const double wv = float_from_bf16_bits(w[v * H + h]);
#pragma unroll
    for (int j = 0; j < kFp64MaxRows; ++j) {
      if (j < n) sums[j] += dz[std::int64_t(j) * V + v] * wv;
    }
  }
  for (int j = 0; j < n; ++j) partial[(segment * n + j) * H + h] = sums[j];
}

__global__ void sum_segments_kernel(const double* __restrict__ partial, int n, std::int64_t H,
                                    double* __restrict__ dy) {
  const std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * H) return;
  double sum = 0.0;
  for (int s = 0; s < kFp64Segments; ++s) sum += partial[s * n * H + e];
  dy[e] = sum;
}

}  // namespace

void fp64_row_logits(const Bf16Bits* hidden, const Bf16Bits* teacher_hidden, const Bf16Bits* lm_head,
                     const std::int64_t* rows, int n, std::int64_t vocab, std::int64_t hidden_size, double* z,
                     double* t) {
  if (n < 1 || n > kFp64MaxRows) throw CudaError(str("fp64_row_logits: ", n, " rows (1 to ", kFp64MaxRows, ")"));
  const auto blocks = static_cast<unsigned int>((vocab + kWarps - 1) / kWarps);
  fp64_row_logits_kernel<<<blocks, 32 * kWarps>>>(hidden, teacher_hidden, lm_head, rows, n, vocab, hidden_size, z, t);
  DFLASH_CUDA_CHECK_LAUNCH("fp64_row_logits_kernel");
  DFLASH_CUDA_CHECK(cudaDeviceSynchronize());
}

void fp64_rows_times_head(const double* dz, const Bf16Bits* lm_head, int n, std::int64_t vocab,
                          std::int64_t hidden_size, double* dy) {
  if (n < 1 || n > kFp64MaxRows) throw CudaError(str("fp64_rows_times_head: ", n, " rows (1 to ", kFp64MaxRows, ")"));
  double* partial = nullptr;
  DFLASH_CUDA_CHECK(cudaMalloc(&partial, sizeof(double) * kFp64Segments * n * hidden_size));
  const dim3 grid(static_cast<unsigned int>((hidden_size + 127) / 128), kFp64Segments);
  fp64_rows_times_head_kernel<<<grid, 128>>>(dz, lm_head, n, vocab, hidden_size, partial);
  const cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    sum_segments_kernel<<<static_cast<unsigned int>((n * hidden_size + 255) / 256), 256>>>(partial, n, hidden_size, dy);
  }
  const cudaError_t done = launched == cudaSuccess ? cudaDeviceSynchronize() : launched;
  cudaFree(partial);
  check_cuda(done, "fp64_rows_times_head", __FILE__, __LINE__);
}

}  // namespace dflash
