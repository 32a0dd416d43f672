// The few dense products the reference needs, written as plain loops with a fixed summation
// order (k ascending), so that results are bitwise reproducible and the same product computed
// in two places (a forward and its recomputation) gives the same bits.
#pragma once

#include <cstdint>

namespace dflash {

// sum_k a[k] b[k], k ascending.
template <class Real>
Real dot(const Real* a, const Real* b, std::int64_t n) {
  Real acc(0);
  for (std::int64_t k = 0; k < n; ++k) acc += a[k] * b[k];
  return acc;
}

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

}  // namespace dflash
