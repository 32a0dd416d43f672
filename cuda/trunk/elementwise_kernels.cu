#include "cuda/trunk/elementwise_kernels.hpp"

#include <stdexcept>
#include <string>

#include "cuda/exec/block_device.cuh"
#include "cuda/runtime/bf16_bits.hpp"
#include "cuda/runtime/check.hpp"
#include "cuda/trunk/elementwise_program.hpp"

namespace dflash {
namespace {

constexpr int kFlatThreads = 256;

unsigned flat_blocks(std::int64_t n) {
  const std::int64_t blocks = (n + kFlatThreads - 1) / kFlatThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("trunk kernel: " + what);
}

// Grid-stride loop over [0, n).
#define DFLASH_FOR_EACH(e, n)                                                                      \
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < (n); \
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

template <class Storage>
__global__ void narrow_kernel(const float* x, std::int64_t n, Storage* y) {
  DFLASH_FOR_EACH(e, n) narrow_at(e, x, y);
}

template <class Storage>
__global__ void embedding_gather_kernel(const std::int64_t* tokens, const Storage* table, std::int64_t n,
                                        std::int64_t H, float* x) {
  DFLASH_FOR_EACH(e, n) embedding_gather_at(e, H, tokens, table, x);
}

template <class Storage>
__global__ void __launch_bounds__(kNormRowThreads)
    rms_norm_forward_kernel(const float* x, const float* w, std::int64_t H, float eps, Storage* y, float* rstd) {
  extern __shared__ __align__(16) unsigned char shared[];
  DeviceBlockExec exec;
  rms_norm_forward_block(exec, x, w, H, eps, y, rstd, shared, blockIdx.x);
}

__global__ void __launch_bounds__(kNormRowThreads)
    rms_norm_backward_kernel(const float* x, const float* w, const float* rstd, const float* dy, std::int64_t H,
                             float* dx) {
  extern __shared__ __align__(16) unsigned char shared[];
  DeviceBlockExec exec;
  rms_norm_backward_block(exec, x, w, rstd, dy, H, dx, shared, blockIdx.x);
}

__global__ void __launch_bounds__(kNormWeightGradThreads)
    rms_norm_weight_grad_kernel(const float* x, const float* rstd, const float* dy, std::int64_t rows, std::int64_t n,
                                float* dw) {
  extern __shared__ __align__(16) unsigned char shared[];
  DeviceBlockExec exec;
  rms_norm_weight_grad_block(exec, x, rstd, dy, rows, n, dw, shared, blockIdx.x);
}

template <class Storage>
__global__ void head_norm_rope_forward_kernel(const float* proj, const float* w, std::int64_t rows_heads,
                                              std::int64_t heads, std::int64_t d, float eps,
                                              const std::int64_t* positions, double theta, Storage* out, float* rstd) {
  DFLASH_FOR_EACH(rh, rows_heads) head_norm_rope_forward_at(rh, proj, w, heads, d, eps, positions, theta, out, rstd);
}

__global__ void head_norm_rope_backward_kernel(float* d_out, const float* proj, const float* w, const float* rstd,
                                               std::int64_t rows_heads, std::int64_t heads, std::int64_t d,
                                               const std::int64_t* positions, double theta, float* d_proj) {
  DFLASH_FOR_EACH(rh, rows_heads) {
    head_norm_rope_backward_at(rh, d_out, proj, w, rstd, heads, d, positions, theta, d_proj);
  }
}

template <class Storage>
__global__ void swiglu_forward_kernel(const Storage* gate, const Storage* up, std::int64_t n, Storage* act) {
  DFLASH_FOR_EACH(e, n) swiglu_forward_at(e, gate, up, act);
}

template <class Storage>
__global__ void swiglu_backward_kernel(const Storage* gate, const Storage* up, const float* d_act, std::int64_t n,
                                       float* d_gate, float* d_up) {
  DFLASH_FOR_EACH(e, n) swiglu_backward_at(e, gate, up, d_act, d_gate, d_up);
}

__global__ void residual_dropout_forward_kernel(const float* x, const float* branch, std::int64_t n,
                                                DropoutSiteView dropout, float* out) {
  DFLASH_FOR_EACH(e, n) residual_dropout_forward_at(e, x, branch, dropout, out);
}

__global__ void residual_dropout_backward_kernel(const float* d_out, std::int64_t n, DropoutSiteView dropout,
                                                 float* d_branch) {
  DFLASH_FOR_EACH(e, n) residual_dropout_backward_at(e, d_out, dropout, d_branch);
}

#undef DFLASH_FOR_EACH

void check_head_dim(std::int64_t d) {
  require(d >= 2 && d % 2 == 0, "head dim d = " + std::to_string(d) + " must be even and at least 2");
}

}  // namespace

template <class Storage>
void launch_narrow(const float* x, std::int64_t n, Storage* y, cudaStream_t stream) {
  require(n >= 0, "narrow size " + std::to_string(n));
  if (n == 0) return;
  narrow_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(x, n, y);
  DFLASH_CUDA_CHECK_LAUNCH("narrow_kernel");
}

template <class Storage>
void launch_embedding_gather(const std::int64_t* tokens, const Storage* table, std::int64_t T, std::int64_t H, float* x,
                             cudaStream_t stream) {
  require(T >= 0 && H >= 1, "embedding gather shape T " + std::to_string(T) + ", H " + std::to_string(H));
  if (T == 0) return;
  embedding_gather_kernel<<<flat_blocks(T * H), kFlatThreads, 0, stream>>>(tokens, table, T * H, H, x);
  DFLASH_CUDA_CHECK_LAUNCH("embedding_gather_kernel");
}

template <class Storage>
void launch_rms_norm_forward(const float* x, const float* w, std::int64_t rows, std::int64_t H, float eps, Storage* y,
                             float* rstd, cudaStream_t stream) {
  require(rows >= 0 && H >= 1, "RMSNorm shape rows " + std::to_string(rows) + ", H " + std::to_string(H));
  if (rows == 0) return;
  rms_norm_forward_kernel<<<static_cast<unsigned>(rows), kNormRowThreads, rms_norm_row_shared_bytes(kNormRowThreads),
                            stream>>>(x, w, H, eps, y, rstd);
  DFLASH_CUDA_CHECK_LAUNCH("rms_norm_forward_kernel");
}

void launch_rms_norm_backward(const float* x, const float* w, const float* rstd, const float* dy, std::int64_t rows,
                              std::int64_t H, float* dx, cudaStream_t stream) {
  require(rows >= 0 && H >= 1, "RMSNorm shape rows " + std::to_string(rows) + ", H " + std::to_string(H));
  if (rows == 0) return;
  rms_norm_backward_kernel<<<static_cast<unsigned>(rows), kNormRowThreads, rms_norm_row_shared_bytes(kNormRowThreads),
                             stream>>>(x, w, rstd, dy, H, dx);
  DFLASH_CUDA_CHECK_LAUNCH("rms_norm_backward_kernel");
}

void launch_rms_norm_weight_grad(const float* x, const float* rstd, const float* dy, std::int64_t rows, std::int64_t n,
                                 float* dw, cudaStream_t stream) {
  require(rows >= 0 && n >= 1,
          "RMSNorm weight gradient shape rows " + std::to_string(rows) + ", n " + std::to_string(n));
  const std::int64_t blocks = rms_norm_weight_grad_blocks(n);
  require(blocks <= 0x7fffffff, "RMSNorm weight gradient n " + std::to_string(n) + " needs too many blocks");
  rms_norm_weight_grad_kernel<<<static_cast<unsigned>(blocks), kNormWeightGradThreads,
                                rms_norm_weight_grad_shared_bytes(kNormWeightGradThreads), stream>>>(x, rstd, dy, rows,
                                                                                                     n, dw);
  DFLASH_CUDA_CHECK_LAUNCH("rms_norm_weight_grad_kernel");
}

template <class Storage>
void launch_head_norm_rope_forward(const float* proj, const float* w, std::int64_t rows, std::int64_t heads,
                                   std::int64_t d, float eps, const std::int64_t* positions, double theta, Storage* out,
                                   float* rstd, cudaStream_t stream) {
  check_head_dim(d);
  require(rows >= 0 && heads >= 1, "head norm shape rows " + std::to_string(rows) + ", heads " + std::to_string(heads));
  if (rows == 0) return;
  head_norm_rope_forward_kernel<<<flat_blocks(rows * heads), kFlatThreads, 0, stream>>>(
      proj, w, rows * heads, heads, d, eps, positions, theta, out, rstd);
  DFLASH_CUDA_CHECK_LAUNCH("head_norm_rope_forward_kernel");
}

void launch_head_norm_rope_backward(float* d_out, const float* proj, const float* w, const float* rstd,
                                    std::int64_t rows, std::int64_t heads, std::int64_t d,
                                    const std::int64_t* positions, double theta, float* d_proj, cudaStream_t stream) {
  check_head_dim(d);
  require(rows >= 0 && heads >= 1, "head norm shape rows " + std::to_string(rows) + ", heads " + std::to_string(heads));
  if (rows == 0) return;
  head_norm_rope_backward_kernel<<<flat_blocks(rows * heads), kFlatThreads, 0, stream>>>(
      d_out, proj, w, rstd, rows * heads, heads, d, positions, theta, d_proj);
  DFLASH_CUDA_CHECK_LAUNCH("head_norm_rope_backward_kernel");
}

template <class Storage>
void launch_swiglu_forward(const Storage* gate, const Storage* up, std::int64_t n, Storage* act, cudaStream_t stream) {
  require(n >= 0, "SwiGLU size " + std::to_string(n));
  if (n == 0) return;
  swiglu_forward_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(gate, up, n, act);
  DFLASH_CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

template <class Storage>
void launch_swiglu_backward(const Storage* gate, const Storage* up, const float* d_act, std::int64_t n, float* d_gate,
                            float* d_up, cudaStream_t stream) {
  require(n >= 0, "SwiGLU size " + std::to_string(n));
  if (n == 0) return;
  swiglu_backward_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(gate, up, d_act, n, d_gate, d_up);
  DFLASH_CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}

void launch_residual_dropout_forward(const float* x, const float* branch, std::int64_t n,
                                     const DropoutSiteView& dropout, float* out, cudaStream_t stream) {
  require(n >= 0, "residual size " + std::to_string(n));
  if (n == 0) return;
  residual_dropout_forward_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(x, branch, n, dropout, out);
  DFLASH_CUDA_CHECK_LAUNCH("residual_dropout_forward_kernel");
}

void launch_residual_dropout_backward(const float* d_out, std::int64_t n, const DropoutSiteView& dropout,
                                      float* d_branch, cudaStream_t stream) {
  require(n >= 0, "residual size " + std::to_string(n));
  if (n == 0) return;
  residual_dropout_backward_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(d_out, n, dropout, d_branch);
  DFLASH_CUDA_CHECK_LAUNCH("residual_dropout_backward_kernel");
}

#define DFLASH_INSTANTIATE(Storage)                                                                                   \
  template void launch_narrow<Storage>(const float*, std::int64_t, Storage*, cudaStream_t);                           \
  template void launch_embedding_gather<Storage>(const std::int64_t*, const Storage*, std::int64_t, std::int64_t,     \
                                                 float*, cudaStream_t);                                               \
  template void launch_rms_norm_forward<Storage>(const float*, const float*, std::int64_t, std::int64_t, float,       \
                                                 Storage*, float*, cudaStream_t);                                     \
  template void launch_head_norm_rope_forward<Storage>(const float*, const float*, std::int64_t, std::int64_t,        \
                                                       std::int64_t, float, const std::int64_t*, double, Storage*,    \
                                                       float*, cudaStream_t);                                         \
  template void launch_swiglu_forward<Storage>(const Storage*, const Storage*, std::int64_t, Storage*, cudaStream_t); \
  template void launch_swiglu_backward<Storage>(const Storage*, const Storage*, const float*, std::int64_t, float*,   \
                                                float*, cudaStream_t);
DFLASH_INSTANTIATE(float)
DFLASH_INSTANTIATE(Bf16Bits)
#undef DFLASH_INSTANTIATE

}  // namespace dflash
