#include "cuda/gemm/cublas_call.hpp"

#include <climits>

#include "io/errors.hpp"

namespace dflash {

int cublas_dimension(std::int64_t value, const char* name) {
  if (value < 0 || value > INT_MAX) throw_input_error(name, str(value, " does not fit cuBLAS's int dimensions"));
  return static_cast<int>(value);
}

namespace {

struct DimNames {
  const char* rows;
  const char* out;
  const char* in;
};
constexpr DimNames kLossHeadNames{"rows", "vocab_size", "hidden_size"};
constexpr DimNames kLinearNames{"linear rows", "linear out", "linear in"};

// y[rows, out] = x[rows, in] w[out, in]^T: column-major y^T (out x rows, ld out) = op_T(w) x^T.
GemmCall forward_call(const Bf16Bits* x, const Bf16Bits* w, void* y, cudaDataType_t y_type, std::int64_t rows,
                      std::int64_t out, std::int64_t in, const DimNames& names) {
  const int m = cublas_dimension(out, names.out), n = cublas_dimension(rows, names.rows),
            k = cublas_dimension(in, names.in);
  return GemmCall{CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, y, y_type, m};
}

// dx[rows, in] = dy[rows, out] w[out, in]: column-major dx^T (in x rows, ld in) = w^T dy^T.
GemmCall input_grad_call(const Bf16Bits* dy, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t out,
                         std::int64_t in, float beta, const DimNames& names) {
  const int m = cublas_dimension(in, names.in), n = cublas_dimension(rows, names.rows),
            k = cublas_dimension(out, names.out);
  return GemmCall{CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, w, CUDA_R_16BF, m, dy, CUDA_R_16BF, k, dx, CUDA_R_32F, m, beta};
}

}  // namespace

GemmCall logits_gemm_call(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* z, std::int64_t rows, std::int64_t vocab,
                          std::int64_t hidden) {
  return forward_call(x, w, z, CUDA_R_16BF, rows, vocab, hidden, kLossHeadNames);
}

GemmCall input_grad_gemm_call(const Bf16Bits* dz, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t vocab,
                              std::int64_t hidden) {
  return input_grad_call(dz, w, dx, rows, vocab, hidden, 0.0f, kLossHeadNames);
}

GemmCall linear_forward_gemm_call(const Bf16Bits* x, const Bf16Bits* w, float* y, std::int64_t rows, std::int64_t out,
                                  std::int64_t in) {
  return forward_call(x, w, y, CUDA_R_32F, rows, out, in, kLinearNames);
}

GemmCall linear_forward_gemm_call(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* y, std::int64_t rows,
                                  std::int64_t out, std::int64_t in) {
  return forward_call(x, w, y, CUDA_R_16BF, rows, out, in, kLinearNames);
}

GemmCall linear_input_grad_gemm_call(const Bf16Bits* dy, const Bf16Bits* w, float* dx, std::int64_t rows,
                                     std::int64_t out, std::int64_t in, bool accumulate) {
  return input_grad_call(dy, w, dx, rows, out, in, accumulate ? 1.0f : 0.0f, kLinearNames);
}

// dW[out, in] += dy^T x: column-major dW^T (in x out, ld in) = x^T (in x rows, ld in) times
// op_T(dy^T stored out x rows, ld out); beta 1 adds to what earlier sequences and chunks summed.
GemmCall linear_weight_grad_gemm_call(const Bf16Bits* dy, const Bf16Bits* x, float* dw, std::int64_t rows,
                                      std::int64_t out, std::int64_t in) {
  const int m = cublas_dimension(in, kLinearNames.in), n = cublas_dimension(out, kLinearNames.out),
            k = cublas_dimension(rows, kLinearNames.rows);
  return GemmCall{CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, x, CUDA_R_16BF, m, dy, CUDA_R_16BF, n, dw, CUDA_R_32F, m, 1.0f};
}

}  // namespace dflash
