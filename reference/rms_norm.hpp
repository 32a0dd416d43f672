// RMSNorm over one vector of n values (SPEC §3): y = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps).
// Used over a hidden row (n = H) and over one head's d values (q_norm, k_norm). Forward returns
// rstd, which backward takes back (with x) instead of recomputing it.
#pragma once

#include <cmath>
#include <cstdint>

namespace dflash {

template <class Real>
Real rms_norm_forward(const Real* x, const Real* w, std::int64_t n, const Real& eps, Real* y) {
  using std::sqrt;
  Real sum_sq(0);
  for (std::int64_t c = 0; c < n; ++c) sum_sq += x[c] * x[c];
  const Real rstd = Real(1) / Real(sqrt(Real(sum_sq / Real(n) + eps)));
  for (std::int64_t c = 0; c < n; ++c) y[c] = w[c] * (x[c] * rstd);
  return rstd;
}

// With g = w dy:  dx += rstd g - x rstd^3 (g . x) / n,  dw += dy (x rstd).
template <class Real>
void rms_norm_backward(const Real* x, const Real* w, const Real& rstd, const Real* dy, std::int64_t n, Real* dx,
                       Real* dw) {
  Real g_dot_x(0);
  for (std::int64_t c = 0; c < n; ++c) {
    dw[c] += dy[c] * (x[c] * rstd);
    g_dot_x += (w[c] * dy[c]) * x[c];
  }
  const Real coef = rstd * rstd * rstd * g_dot_x / Real(n);
  for (std::int64_t c = 0; c < n; ++c) dx[c] += rstd * (w[c] * dy[c]) - x[c] * coef;
}

}  // namespace dflash
