// The arguments of every cublasGemmEx call the loss head and the trunk's linear layers make, as a
// pure function of the row-major shapes (no handle, no device): the CPU test
// (tests/cuda/gemm/test_cublas_gemm_call.cpp) runs a textbook column-major GEMM on exactly these
// arguments and checks it against the row-major products they are meant to compute.
//
// Every call runs as gemm_calls_within_span's slices (run_gemm_call): no operand of one cuBLAS call
// spans 2^31 elements or more.
//
// Row-major [r, c] is column-major [c, r] with leading dimension c, so a row-major product
// C = A B is the column-major C^T = B^T A^T: the operands swap places.
//   logits      Z[r,V] = X[r,H] W[V,H]^T  ->  Z^T (V x r, ld V) = op_T(W as H x V, ld H) X^T (H x r, ld H)
//   input grad  dX[r,H] = dZ[r,V] W[V,H] ->  dX^T (H x r, ld H) = W^T (H x V, ld H) dZ^T (V x r, ld V)
// bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F); logits stored bf16, dL/dY fp32.
//
// The trunk's projections (SPEC §3, no biases) are the same two products plus the weight gradient:
//   forward      y[M,out] = x[M,in] W[out,in]^T     ->  "TN" as the logits (fp32 or bf16 out)
//   input grad   dx[M,in] (+)= dy[M,out] W[out,in]  ->  "NN" as the input grad (beta 1 accumulates)
//   weight grad  dW[out,in] += dy[M,out]^T x[M,in]  ->  dW^T (in x out, ld in) = x^T (in x M, ld in)
//                                                        op_T(dy^T as out x M, ld out): "NT", beta 1
#pragma once

#include <cstdint>
#include <vector>

#include <cublas_v2.h>

#include "cuda/runtime/bf16_bits.hpp"

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
  float beta = 0.0f;  // C = op(A) op(B) + beta C (alpha is always 1); with 0 cuBLAS never reads C
};

// The math mode of every handle (create_cublas_handle): no TF32 (the operands are bf16 already), and
// no reduction in the output's precision. By default cuBLAS may add a split-K product's partial sums
// in the output type; for a bf16 output (logits, the trunk's bf16 projections) that rounds each
// partial to bf16 before they are added, where the project's bf16 twin (SPEC §10's plain
// computation) accumulates in fp32 and rounds once. Holding cuBLAS to the compute type keeps the
// GPU within the rule the twin sets.
inline constexpr cublasMath_t kGemmMathMode =
    static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);

// cuBLAS takes int dimensions: throws InputError naming the dimension when one does not fit.
int cublas_dimension(std::int64_t value, const char* name);

// The most elements one operand of one cuBLAS call may span: 2^31 - 1. cuBLAS takes int sizes and
// 64-bit offsets, yet some cuBLASLt algorithms index an operand's span (its columns times its
// leading dimension) in 32 bits and fail with CUBLAS_STATUS_EXECUTION_FAILED from 2^31 elements on
// (reported for cuBLASLt 13.6, NVIDIA/raft#3097), although the heuristic offers them. Every int fits
// and the product is still too large: `materialize` at full scale makes logits of 32768 x 248320 =
// 8.1e9 elements, and its dL/dY product reads them back.
inline constexpr std::int64_t kGemmMaxOperandSpan = (std::int64_t(1) << 31) - 1;

// The elements a column-major operand of `columns` columns with leading dimension `ld` spans,
// taken as columns x ld (an upper bound of (columns - 1) ld + rows, and the measure cuBLASLt trips on).
inline std::int64_t gemm_operand_span(std::int64_t columns, std::int64_t ld) { return columns * ld; }

// How gemm_calls_within_span cuts a call: the slices [first, first + count) of m, n and k, in order
// (one whole slice where a dimension is not cut). Where n is cut, the calls of a `rows`-row product
// (logits, input grad: C's or B's columns are the rows) start at the n slices' firsts.
struct GemmSlice {
  std::int64_t first, count;
};
struct GemmSlicing {
  std::vector<GemmSlice> m, n, k;
};
GemmSlicing gemm_slicing_within_span(const GemmCall& g, std::int64_t max_span = kGemmMaxOperandSpan);

// `g` as the calls that compute the same C with every operand spanning at most `max_span` elements
// (gemm_operand_span of A, B and C): {g} when it already does. Otherwise g is cut into near-equal
// slices along n (C's columns; B's when B is not transposed), m (A's columns when A is transposed)
// and k (A's columns when A is not transposed, B's when B is): as few slices along each as its
// operands allow, each slice's pointers moved to its first element. Slices along m and n write
// disjoint parts of C; the slices along k of one part run in order of k, the first with g's beta and
// the rest adding to C (beta 1). Run in the returned order on one stream.
// Throws InputError when a cut along k is needed for a bf16 C (every partial sum would be rounded
// to bf16: outside SPEC §10's plain computation, which rounds once), or when one column of an
// operand alone spans more than max_span.
std::vector<GemmCall> gemm_calls_within_span(const GemmCall& g, std::int64_t max_span = kGemmMaxOperandSpan);

// z[rows, vocab] = x[rows, hidden] w[vocab, hidden]^T (bf16 out)
GemmCall logits_gemm_call(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* z, std::int64_t rows, std::int64_t vocab,
                          std::int64_t hidden);

// dx[rows, hidden] = dz[rows, vocab] w[vocab, hidden] (fp32 out)
GemmCall input_grad_gemm_call(const Bf16Bits* dz, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t vocab,
                              std::int64_t hidden);

// The trunk's linear layers (cuda/gemm/linear.hpp). Dimension errors name "linear rows|out|in".
// y[rows, out] = x[rows, in] w[out, in]^T
GemmCall linear_forward_gemm_call(const Bf16Bits* x, const Bf16Bits* w, float* y, std::int64_t rows, std::int64_t out,
                                  std::int64_t in);
GemmCall linear_forward_gemm_call(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* y, std::int64_t rows,
                                  std::int64_t out, std::int64_t in);
// dx[rows, in] = dy[rows, out] w[out, in] (+ dx when accumulate)
GemmCall linear_input_grad_gemm_call(const Bf16Bits* dy, const Bf16Bits* w, float* dx, std::int64_t rows,
                                     std::int64_t out, std::int64_t in, bool accumulate);
// dw[out, in] += dy[rows, out]^T x[rows, in]
GemmCall linear_weight_grad_gemm_call(const Bf16Bits* dy, const Bf16Bits* x, float* dw, std::int64_t rows,
                                      std::int64_t out, std::int64_t in);

}  // namespace dflash
