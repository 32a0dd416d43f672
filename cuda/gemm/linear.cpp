#include "cuda/gemm/linear.hpp"

#include "cuda/gemm/cublas.hpp"
#include "cuda/gemm/cublas_call.hpp"

namespace dflash {

LinearGemm::LinearGemm(DeviceAllocator& allocator) : workspace_(allocator, MemoryCategory::transient, kWorkspaceBytes) {
  handle_ = create_cublas_handle(allocator.stream(), workspace_.data(), workspace_.bytes());
}

LinearGemm::~LinearGemm() { cublasDestroy(handle_); }

void LinearGemm::forward(const Bf16Bits* x, const Bf16Bits* w, float* y, std::int64_t rows, std::int64_t out,
                         std::int64_t in) {
  if (rows > 0) run_gemm_call(handle_, linear_forward_gemm_call(x, w, y, rows, out, in));
}

void LinearGemm::forward(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* y, std::int64_t rows, std::int64_t out,
                         std::int64_t in) {
  if (rows > 0) run_gemm_call(handle_, linear_forward_gemm_call(x, w, y, rows, out, in));
}

void LinearGemm::input_grad(const Bf16Bits* dy, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t out,
                            std::int64_t in, bool accumulate) {
  if (rows > 0) run_gemm_call(handle_, linear_input_grad_gemm_call(dy, w, dx, rows, out, in, accumulate));
}

void LinearGemm::weight_grad(const Bf16Bits* dy, const Bf16Bits* x, float* dw, std::int64_t rows, std::int64_t out,
                             std::int64_t in) {
  if (rows > 0) run_gemm_call(handle_, linear_weight_grad_gemm_call(dy, x, dw, rows, out, in));
}

}  // namespace dflash
