#include "cuda/linear_gemm.hpp"

#include <climits>

#include "cuda/cublas_gemm.hpp"
#include "cuda/cuda_check.hpp"
#include "reference/errors.hpp"

namespace dflash {
namespace {

int gemm_dim(std::int64_t value, const char* name) {
  if (value < 0 || value > INT_MAX) throw_input_error(name, str(value, " does not fit cuBLAS's int dimensions"));
  return static_cast<int>(value);
}

}  // namespace

LinearGemm::LinearGemm(DeviceAllocator& allocator) : workspace_(allocator, MemoryCategory::transient, kWorkspaceBytes) {
  handle_ = create_cublas_handle(allocator.stream(), workspace_.data(), workspace_.bytes());
}

LinearGemm::~LinearGemm() { cublasDestroy(handle_); }

void LinearGemm::forward_typed(const Bf16Bits* x, const Bf16Bits* w, void* y, cudaDataType_t y_type,
                               std::int64_t rows, std::int64_t out, std::int64_t in) {
  if (rows == 0) return;
  const int m = gemm_dim(out, "linear out"), n = gemm_dim(rows, "linear rows"), k = gemm_dim(in, "linear in");
  const float alpha = 1.0f, beta = 0.0f;
  DFLASH_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w, CUDA_R_16BF, k, x,
                                   CUDA_R_16BF, k, &beta, y, y_type, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void LinearGemm::forward(const Bf16Bits* x, const Bf16Bits* w, float* y, std::int64_t rows, std::int64_t out,
                         std::int64_t in) {
  forward_typed(x, w, y, CUDA_R_32F, rows, out, in);
}

void LinearGemm::forward(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* y, std::int64_t rows, std::int64_t out,
                         std::int64_t in) {
  forward_typed(x, w, y, CUDA_R_16BF, rows, out, in);
}

void LinearGemm::input_grad(const Bf16Bits* dy, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t out,
                            std::int64_t in, bool accumulate) {
  if (rows == 0) return;
  const int m = gemm_dim(in, "linear in"), n = gemm_dim(rows, "linear rows"), k = gemm_dim(out, "linear out");
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  DFLASH_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, w, CUDA_R_16BF, m, dy,
                                   CUDA_R_16BF, k, &beta, dx, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void LinearGemm::weight_grad(const Bf16Bits* dy, const Bf16Bits* x, float* dw, std::int64_t rows, std::int64_t out,
                             std::int64_t in) {
  if (rows == 0) return;
  const int m = gemm_dim(in, "linear in"), n = gemm_dim(out, "linear out"), k = gemm_dim(rows, "linear rows");
  const float alpha = 1.0f, beta = 1.0f;
  DFLASH_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, x, CUDA_R_16BF, m, dy,
                                   CUDA_R_16BF, n, &beta, dw, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace dflash
