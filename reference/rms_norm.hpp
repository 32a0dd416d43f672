// RMSNorm over one vector of n values (SPEC §3): y = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps).
// Used over a hidden row (n = H) and over one head's d values (q_norm, k_norm). Forward returns
// rstd, which backward takes back (with x) instead of recomputing it. DFLASH_HD: the CUDA kernels
// normalise each head's d values with these same functions in float.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hd.hpp"

namespace dflash {

// rstd of x alone: what a caller that makes y value by value (the q/k norm kernel, which rotates
// each pair as it goes and so keeps no row of y) computes first.
template <class Real>
DFLASH_HD Real rms_norm_rstd(const Real* x, std::int64_t n, const Real& eps) {
  using std::sqrt;
  Real sum_sq(0);
  for (std::int64_t c = 0; c < n; ++c) sum_sq += x[c] * x[c];
  return Real(1) / Real(sqrt(Real(sum_sq / Real(n) + eps)));
}

// y[c] of the forward, given rstd.
template <class Real>
DFLASH_HD Real rms_norm_value(const Real& x, const Real& w, const Real& rstd) {
  return w * (x * rstd);
}

template <class Real>
DFLASH_HD Real rms_norm_forward(const Real* x, const Real* w, std::int64_t n, const Real& eps, Real* y) {
  const Real rstd = rms_norm_rstd(x, n, eps);
  for (std::int64_t c = 0; c < n; ++c) y[c] = rms_norm_value(x[c], w[c], rstd);
  return rstd;
}

// With g = w dy:  dx += rstd g - x rstd^3 (g . x) / n,  dw += dy (x rstd). The two halves are
// separate so that a kernel can reduce dw over rows apart from dx.
template <class Real>
DFLASH_HD void rms_norm_input_grad(const Real* x, const Real* w, const Real& rstd, const Real* dy, std::int64_t n,
                                   Real* dx) {
  Real g_dot_x(0);
  for (std::int64_t c = 0; c < n; ++c) g_dot_x += (w[c] * dy[c]) * x[c];
  const Real coef = rstd * rstd * rstd * g_dot_x / Real(n);
  for (std::int64_t c = 0; c < n; ++c) dx[c] += rstd * (w[c] * dy[c]) - x[c] * coef;
}

template <class Real>
DFLASH_HD void rms_norm_weight_grad(const Real* x, const Real& rstd, const Real* dy, std::int64_t n, Real* dw) {
  for (std::int64_t c = 0; c < n; ++c) dw[c] += dy[c] * (x[c] * rstd);
}

template <class Real>
void rms_norm_backward(const Real* x, const Real* w, const Real& rstd, const Real* dy, std::int64_t n, Real* dx,
                       Real* dw) {
  rms_norm_weight_grad(x, rstd, dy, n, dw);
  rms_norm_input_grad(x, w, rstd, dy, n, dx);
}

}  // namespace dflash
