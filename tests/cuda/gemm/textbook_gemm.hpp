// A textbook column-major GEMM that reads exactly the arguments cuBLAS would get from a GemmCall
// (cuda/gemm/cublas_call.hpp): operations, m, n, k, leading dimensions, element types, beta, and
// which buffer is A, B and C, with every index checked against its buffer. Shared by the loss
// head's and the trunk's call tests (test_cublas_gemm_call.cpp, test_linear_gemm_call.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/bf16.hpp"
#include "cuda/gemm/cublas_call.hpp"
#include "io/errors.hpp"

namespace dflash {

// A GEMM operand: a buffer of `elements` values of the call's type, read from `data`, or (for
// shapes too large to hold) computed from the index by `value`.
struct GemmOperand {
  const void* data = nullptr;
  std::size_t elements = 0;
  std::function<double(std::int64_t)> value = {};
};

inline double read_operand(const GemmOperand& b, cudaDataType_t type, std::int64_t index, const char* name) {
  if (index < 0 || static_cast<std::size_t>(index) >= b.elements) {
    throw std::out_of_range(str(name, "[", index, "] is outside its ", b.elements, " elements"));
  }
  if (b.value) return b.value(index);
  if (type == CUDA_R_16BF) return float_from_bf16_bits(static_cast<const Bf16Bits*>(b.data)[index]);
  if (type == CUDA_R_32F) return static_cast<const float*>(b.data)[index];
  throw std::invalid_argument(str(name, ": element type ", int(type), " is not bf16 or fp32"));
}

// n bf16 operands uniform in [-2, 2) (distinct per seed).
inline std::vector<Bf16Bits> random_bf16(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<Bf16Bits> out(n);
  for (Bf16Bits& x : out) x = bf16_bits_from_float(d(rng));
  return out;
}

// The column-major index of C's element (i, j), checked against C's elements.
inline std::int64_t textbook_c_index(const GemmCall& g, int i, int j, std::size_t c_elements) {
  const std::int64_t ci = i + std::int64_t(j) * g.ldc;
  if (ci < 0 || static_cast<std::size_t>(ci) >= c_elements) {
    throw std::out_of_range(str("C[", ci, "] is outside its ", c_elements, " elements"));
  }
  return ci;
}

// C(i, j) = sum_l op(A)(i, l) op(B)(l, j) + beta C(i, j), in double in the order l = 0..k-1; C is
// read only when beta is not 0 (cuBLAS's contract: C may hold anything then).
inline double textbook_element(const GemmCall& g, const GemmOperand& a, const GemmOperand& b, const GemmOperand& c,
                               int i, int j) {
  double sum = 0;
  for (int l = 0; l < g.k; ++l) {
    const std::int64_t ai = g.transa == CUBLAS_OP_N ? i + std::int64_t(l) * g.lda : l + std::int64_t(i) * g.lda;
    const std::int64_t bi = g.transb == CUBLAS_OP_N ? l + std::int64_t(j) * g.ldb : j + std::int64_t(l) * g.ldb;
    sum += read_operand(a, g.a_type, ai, "A") * read_operand(b, g.b_type, bi, "B");
  }
  const std::int64_t ci = textbook_c_index(g, i, j, c.elements);
  return g.beta == 0.0f ? sum : sum + double(g.beta) * read_operand(c, g.c_type, ci, "C");
}

// Every element of C, stored in C's type (bf16 or fp32) at `c` (which holds c_elements).
inline void textbook_column_major_gemm(const GemmCall& g, const GemmOperand& a, const GemmOperand& b, void* c,
                                       std::size_t c_elements) {
  const GemmOperand c_in{c, c_elements, {}};
  for (int j = 0; j < g.n; ++j) {
    for (int i = 0; i < g.m; ++i) {
      const double v = textbook_element(g, a, b, c_in, i, j);
      const std::int64_t ci = textbook_c_index(g, i, j, c_elements);
      if (g.c_type == CUDA_R_16BF) {
        static_cast<Bf16Bits*>(c)[ci] = bf16_bits_from_float(static_cast<float>(v));
      } else if (g.c_type == CUDA_R_32F) {
        static_cast<float*>(c)[ci] = static_cast<float>(v);
      } else {
        throw std::invalid_argument("C: element type is not bf16 or fp32");
      }
    }
  }
}

}  // namespace dflash
