// The few dense products the reference needs. Every output element is one sum in a fixed order:
//   C[i,j] = (((c0 + A[i,0] B[0,j]) + A[i,1] B[1,j]) + ...) + A[i,K-1] B[K-1,j]
// with k ascending, each product rounded, then added (no FMA), and c0 = 0 for a product, the
// existing C[i,j] for an accumulation. That order depends on nothing but K, so a product gives the
// same bits whether it is computed for one row or a thousand, in one call or in chunks, on one
// thread or many, and a forward and its recomputation agree bitwise.
//
// For any Real the products are the plain loops of linalg_plain below (the 50-digit
// instantiation, the judge, runs these). For double they go to matrix_product (linalg.cpp):
// cache-blocked, vectorised across output columns, split across reference_threads() by output
// rows or columns, with the instruction set chosen at run time. Because vectorising across
// outputs leaves each element's sum untouched, it returns exactly the bits of the plain loops on
// every x86-64 (tests/reference/test_linalg.cpp checks it, for each instruction set this CPU runs).
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

namespace dflash {

// sum_k a[k] b[k], k ascending.
template <class Real>
Real dot(const Real* a, const Real* b, std::int64_t n) {
  Real acc(0);
  for (std::int64_t k = 0; k < n; ++k) acc += a[k] * b[k];
  return acc;
}

namespace linalg_plain {

// C[M,N] = A[M,K] B[N,K]^T  (a linear layer y = x W^T)
template <class Real>
void matmul_abt(const Real* a, const Real* b, Real* c, std::int64_t m, std::int64_t n, std::int64_t k) {
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) c[i * n + j] = dot(a + i * k, b + j * k, k);
  }
}

// C[M,N] += A[M,K] B[K,N]  (input gradient of a linear layer: dx += dy W)
template <class Real>
void matmul_ab_accumulate(const Real* a, const Real* b, Real* c, std::int64_t m, std::int64_t n, std::int64_t k) {
  for (std::int64_t i = 0; i < m; ++i) {
    Real* ci = c + i * n;
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const Real aik = a[i * k + kk];
      const Real* bk = b + kk * n;
      for (std::int64_t j = 0; j < n; ++j) ci[j] += aik * bk[j];
    }
  }
}

// C[M,N] += A[K,M]^T B[K,N]  (weight gradient of a linear layer: dW += dy^T x), rows k ascending.
template <class Real>
void matmul_atb_accumulate(const Real* a, const Real* b, Real* c, std::int64_t m, std::int64_t n, std::int64_t k) {
  for (std::int64_t kk = 0; kk < k; ++kk) {
    const Real* ak = a + kk * m;
    const Real* bk = b + kk * n;
    for (std::int64_t i = 0; i < m; ++i) {
      const Real aki = ak[i];
      Real* ci = c + i * n;
      for (std::int64_t j = 0; j < n; ++j) ci[j] += aki * bk[j];
    }
  }
}

}  // namespace linalg_plain

// A matrix read through strides: element (r, c) is data[r * row_stride + c * col_stride].
struct StridedMatrix {
  const double* data;
  std::int64_t row_stride, col_stride;
};

// The instruction sets matrix_product has kernels for (one register tile shape each).
enum class ProductIsa { sse2, avx2, avx512 };
std::string_view product_isa_name(ProductIsa isa);
std::vector<ProductIsa> product_isas_this_cpu_runs();  // ascending; sse2 always
ProductIsa best_product_isa();                         // what matrix_product uses here

// C[i,j] (+)= sum_k A(i,k) B(k,j) for i < m, j < n, in the order of the file comment; C is
// row-major with row stride ldc; accumulate = false starts from 0, true from C.
void matrix_product(StridedMatrix a, StridedMatrix b, double* c, std::int64_t ldc, std::int64_t m, std::int64_t n,
                    std::int64_t k, bool accumulate);
// The same with a given instruction set (tests run each one the CPU supports); throws InputError
// naming `isa` for one the CPU lacks.
void matrix_product(ProductIsa isa, StridedMatrix a, StridedMatrix b, double* c, std::int64_t ldc, std::int64_t m,
                    std::int64_t n, std::int64_t k, bool accumulate);

// y[c] += alpha x[c] for c < n (element-wise: vectorising it changes no bits).
void axpy(std::int64_t n, double alpha, const double* x, double* y);

// out[j] = dot(x, rows + j row_stride, n) for j < count: a row against many (attention scores).
template <class Real>
void dot_rows(const Real* x, const Real* rows, std::int64_t row_stride, std::int64_t count, std::int64_t n, Real* out) {
  if constexpr (std::is_same_v<Real, double>) {
    matrix_product({x, 0, 1}, {rows, 1, row_stride}, out, count, 1, count, n, false);
  } else {
    for (std::int64_t j = 0; j < count; ++j) out[j] = dot(x, rows + j * row_stride, n);
  }
}

// y[c] += alpha x[c] for c < n.
template <class Real>
void add_scaled(std::int64_t n, const Real& alpha, const Real* x, Real* y) {
  if constexpr (std::is_same_v<Real, double>) {
    axpy(n, alpha, x, y);
  } else {
    for (std::int64_t c = 0; c < n; ++c) y[c] += alpha * x[c];
  }
}

// C[M,N] = A[M,K] B[N,K]^T  (a linear layer y = x W^T)
template <class Real>
void matmul_abt(const Real* a, const Real* b, Real* c, std::int64_t m, std::int64_t n, std::int64_t k) {
  if constexpr (std::is_same_v<Real, double>) {
    matrix_product({a, k, 1}, {b, 1, k}, c, n, m, n, k, false);
  } else {
    linalg_plain::matmul_abt(a, b, c, m, n, k);
  }
}

// C[M,N] += A[M,K] B[K,N]  (input gradient of a linear layer: dx += dy W)
template <class Real>
void matmul_ab_accumulate(const Real* a, const Real* b, Real* c, std::int64_t m, std::int64_t n, std::int64_t k) {
  if constexpr (std::is_same_v<Real, double>) {
    matrix_product({a, k, 1}, {b, n, 1}, c, n, m, n, k, true);
  } else {
    linalg_plain::matmul_ab_accumulate(a, b, c, m, n, k);
  }
}

// C[M,N] += A[K,M]^T B[K,N]  (weight gradient of a linear layer: dW += dy^T x), rows k ascending.
template <class Real>
void matmul_atb_accumulate(const Real* a, const Real* b, Real* c, std::int64_t m, std::int64_t n, std::int64_t k) {
  if constexpr (std::is_same_v<Real, double>) {
    matrix_product({a, 1, m}, {b, n, 1}, c, n, m, n, k, true);
  } else {
    linalg_plain::matmul_atb_accumulate(a, b, c, m, n, k);
  }
}

}  // namespace dflash
