#include "cuda/cublas_gemm_call.hpp"

#include <climits>

#include "reference/errors.hpp"

namespace dflash {

int cublas_dimension(std::int64_t value, const char* name) {
  if (value < 0 || value > INT_MAX) throw_input_error(name, str(value, " does not fit cuBLAS's int dimensions"));
  return static_cast<int>(value);
}

GemmCall logits_gemm_call(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* z, std::int64_t rows, std::int64_t vocab,
                          std::int64_t hidden) {
  const int m = cublas_dimension(vocab, "vocab_size"), n = cublas_dimension(rows, "rows"),
            k = cublas_dimension(hidden, "hidden_size");
  return GemmCall{CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, z, CUDA_R_16BF, m};
}

GemmCall input_grad_gemm_call(const Bf16Bits* dz, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t vocab,
                              std::int64_t hidden) {
  const int m = cublas_dimension(hidden, "hidden_size"), n = cublas_dimension(rows, "rows"),
            k = cublas_dimension(vocab, "vocab_size");
  return GemmCall{CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, w, CUDA_R_16BF, m, dz, CUDA_R_16BF, k, dx, CUDA_R_32F, m};
}

}  // namespace dflash
