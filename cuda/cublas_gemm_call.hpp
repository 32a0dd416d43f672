// The arguments of every cublasGemmEx call the loss head makes, as a pure function of the
// row-major shapes (no handle, no device): the CPU test (tests/cuda/test_cublas_gemm_call.cpp)
// runs a textbook column-major GEMM on exactly these arguments and checks it against the
// row-major products they are meant to compute.
//
// Row-major [r, c] is column-major [c, r] with leading dimension c, so a row-major product
// C = A B is the column-major C^T = B^T A^T: the operands swap places.
//   logits      Z[r,V] = X[r,H] W[V,H]^T  ->  Z^T (V x r, ld V) = op_T(W as H x V, ld H) X^T (H x r, ld H)
//   input grad  dX[r,H] = dZ[r,V] W[V,H] ->  dX^T (H x r, ld H) = W^T (H x V, ld H) dZ^T (V x r, ld V)
// bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F); logits stored bf16, dL/dY fp32.
#pragma once

#include <cstdint>

#include <cublas_v2.h>

#include "cuda/bf16_bits.hpp"

namespace dflash {

struct GemmCall {
  cublasOperation_t transa, transb;
  int m, n, k;
  const void* a;
  cudaDataType_t a_type;
  int lda;
  const void* b;
  cudaDataType_t b_type;
  int ldb;
  void* c;
  cudaDataType_t c_type;
  int ldc;
};

// cuBLAS takes int dimensions: throws InputError naming the dimension when one does not fit.
int cublas_dimension(std::int64_t value, const char* name);

// z[rows, vocab] = x[rows, hidden] w[vocab, hidden]^T (bf16 out)
GemmCall logits_gemm_call(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* z, std::int64_t rows, std::int64_t vocab,
                          std::int64_t hidden);

// dx[rows, hidden] = dz[rows, vocab] w[vocab, hidden] (fp32 out)
GemmCall input_grad_gemm_call(const Bf16Bits* dz, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t vocab,
                              std::int64_t hidden);

}  // namespace dflash
