#include "cuda/cublas_gemm.hpp"

#include <climits>

#include "cuda/cuda_check.hpp"
#include "reference/errors.hpp"

namespace dflash {
namespace {

int gemm_dim(std::int64_t value, const char* name) {
  if (value < 0 || value > INT_MAX) throw_input_error(name, str(value, " does not fit cuBLAS's int dimensions"));
  return static_cast<int>(value);
}

}  // namespace

CublasGemm::CublasGemm(DeviceAllocator& allocator, std::size_t workspace_bytes)
    : workspace_(allocator, MemoryCategory::transient, workspace_bytes) {
  DFLASH_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    DFLASH_CUBLAS_CHECK(cublasSetStream(handle_, allocator.stream()));
    DFLASH_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()));
    DFLASH_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
    DFLASH_CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

CublasGemm::~CublasGemm() { cublasDestroy(handle_); }

void CublasGemm::logits(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* z, std::int64_t rows, std::int64_t vocab,
                        std::int64_t hidden) {
  if (rows == 0) return;
  const int m = gemm_dim(vocab, "vocab_size"), n = gemm_dim(rows, "rows"), k = gemm_dim(hidden, "hidden_size");
  const float alpha = 1.0f, beta = 0.0f;
  DFLASH_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w, CUDA_R_16BF, k, x,
                                   CUDA_R_16BF, k, &beta, z, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

void CublasGemm::input_grad(const Bf16Bits* dz, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t vocab,
                            std::int64_t hidden) {
  if (rows == 0) return;
  const int m = gemm_dim(hidden, "hidden_size"), n = gemm_dim(rows, "rows"), k = gemm_dim(vocab, "vocab_size");
  const float alpha = 1.0f, beta = 0.0f;  // every row of dL/dY comes from exactly one product
  DFLASH_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, w, CUDA_R_16BF, m, dz,
                                   CUDA_R_16BF, k, &beta, dx, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

}  // namespace dflash
