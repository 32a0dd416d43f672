// Directional derivatives by central differences, for checking analytic gradients (SPEC §10).
// In 50-digit arithmetic with a tiny step the difference quotient is exact to far beyond double
// precision (truncation ~ eps^2, cancellation ~ 1e-50 / eps), so whatever disagreement remains is
// the double gradient's own error. Two evaluations per direction keep it cheap.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>

#include "reference/counter_rng.hpp"
#include "reference/tensor.hpp"

namespace dflash {

// (f(x + eps d) - f(x - eps d)) / (2 eps); x is restored afterwards.
template <class Real>
Real central_difference(const std::function<Real()>& f, Tensor<Real>& x, std::span<const double> direction,
                        const Real& eps) {
  auto shift = [&](const Real& by) {
    for (std::int64_t i = 0; i < x.numel(); ++i) x[i] += by * Real(direction[static_cast<std::size_t>(i)]);
  };
  const Tensor<Real> original = x.clone(MemoryCategory::transient);
  shift(eps);
  const Real plus = f();
  for (std::int64_t i = 0; i < x.numel(); ++i) x[i] = original[i];
  shift(Real(-eps));
  const Real minus = f();
  for (std::int64_t i = 0; i < x.numel(); ++i) x[i] = original[i];
  return (plus - minus) / (Real(2) * eps);
}

// A random direction with entries in [-1, 1).
inline std::vector<double> random_direction(std::int64_t n, std::uint64_t seed) {
  CounterRng rng(seed, 0xD1);
  std::vector<double> d(static_cast<std::size_t>(n));
  for (double& v : d) v = rng.uniform(-1, 1);
  return d;
}

// The analytic side, and the scale it is judged against: sum |g_i d_i| (a dot product of n terms
// cannot be trusted below roughly n eps times this, whatever its value), plus the entries' floor.
struct DirectionalCheck {
  double analytic = 0;
  double magnitude = 0;
};
// The SPEC §10 measure: |analytic - fd| / sum |g_i d_i|. The 50-digit quotient is itself exact
// only to about |f| 1e-50 / eps = |f| 1e-30 (eps = 1e-20); a difference below `fd_noise` (take
// 1e-25 max(1, |f|)) is that noise, and counts as 0 (a gradient that is exactly zero is matched by
// a quotient of ~1e-33, not by 0).
inline double directional_error(const DirectionalCheck& a, double fd, double fd_noise) {
  const double diff = std::abs(a.analytic - fd);
  if (diff <= fd_noise) return 0;
  return a.magnitude == 0 ? std::numeric_limits<double>::infinity() : diff / a.magnitude;
}

// `entry_floor`: the absolute accuracy the gradient's entries can have at all (for the loss head,
// GradientFloors: saturated probabilities are known to ~eps absolute), added to the scale as
// entry_floor * sum |d_i|.
template <class Real>
DirectionalCheck directional_derivative(std::span<const Real> gradient, std::span<const double> direction,
                                        double entry_floor = 0) {
  DirectionalCheck c;
  for (std::size_t i = 0; i < gradient.size(); ++i) {
    c.analytic += static_cast<double>(gradient[i]) * direction[i];
    c.magnitude += std::abs(static_cast<double>(gradient[i]) * direction[i]) + entry_floor * std::abs(direction[i]);
  }
  return c;
}

}  // namespace dflash
