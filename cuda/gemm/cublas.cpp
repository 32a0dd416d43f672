#include "cuda/gemm/cublas.hpp"

#include <cstdint>
#include <stdexcept>

#include "cuda/gemm/cublas_call.hpp"
#include "cuda/runtime/check.hpp"
#include "io/errors.hpp"

namespace dflash {
// alpha 1: the loss head's products have beta 0 (every output element from exactly one product);
// the trunk's accumulating gradients beta 1. One cublasGemmEx per slice that keeps every operand
// under 2^31 elements (gemm_calls_within_span); below that, the call itself.
void run_gemm_call(cublasHandle_t handle, const GemmCall& call) {
  const float alpha = 1.0f;
  for (const GemmCall& g : gemm_calls_within_span(call)) {
    DFLASH_CUBLAS_CHECK(cublasGemmEx(handle, g.transa, g.transb, g.m, g.n, g.k, &alpha, g.a, g.a_type, g.lda, g.b,
                                     g.b_type, g.ldb, &g.beta, g.c, g.c_type, g.ldc, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
  }
}

cublasHandle_t create_cublas_handle(cudaStream_t stream, void* workspace, std::size_t workspace_bytes) {
  // cublasSetWorkspace requires 256-byte alignment; the allocator's blocks have it (cudaMallocAsync's
  // practice, not its documented promise), so a workspace without it is refused here by name.
  if (reinterpret_cast<std::uintptr_t>(workspace) % kCublasWorkspaceAlignment != 0) {
    throw std::logic_error(
        str("cuBLAS workspace at ", workspace, " is not ", kCublasWorkspaceAlignment, "-byte aligned"));
  }
  cublasHandle_t handle = nullptr;
  DFLASH_CUBLAS_CHECK(cublasCreate(&handle));
  try {
    DFLASH_CUBLAS_CHECK(cublasSetStream(handle, stream));
    DFLASH_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace, workspace_bytes));
    DFLASH_CUBLAS_CHECK(cublasSetMathMode(handle, kGemmMathMode));
    DFLASH_CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  } catch (...) {
    cublasDestroy(handle);
    throw;
  }
  return handle;
}

CublasGemm::CublasGemm(DeviceAllocator& allocator, std::size_t workspace_bytes)
    : workspace_(allocator, MemoryCategory::transient, workspace_bytes) {
  handle_ = create_cublas_handle(allocator.stream(), workspace_.data(), workspace_.bytes());
}

CublasGemm::~CublasGemm() { cublasDestroy(handle_); }

void CublasGemm::logits(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* z, std::int64_t rows, std::int64_t vocab,
                        std::int64_t hidden) {
  if (rows == 0) return;
  run_gemm_call(handle_, logits_gemm_call(x, w, z, rows, vocab, hidden));
}

void CublasGemm::input_grad(const Bf16Bits* dz, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t vocab,
                            std::int64_t hidden) {
  if (rows == 0) return;
  run_gemm_call(handle_, input_grad_gemm_call(dz, w, dx, rows, vocab, hidden));
}

}  // namespace dflash
