// Rotary position embedding on a d-vector at position p (SPEC §3): for i < d/2,
// phi = p theta^(-2i/d), x'[i] = x[i] cos phi - x[i+d/2] sin phi, x'[i+d/2] = x[i+d/2] cos phi + x[i] sin phi.
// A rotation: its backward is the transposed rotation (the same angle, sines negated).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "common/rope_rotation.hpp"
#include "reference/tensor.hpp"

namespace dflash {

// cos and sin of every angle a list of positions needs, [positions, d/2] each. A pure function of
// the positions: a layer's forward, its recomputation and its backward all build the same table.
template <class Real>
struct RopeTable {
  Tensor<Real> cos_phi;
  Tensor<Real> sin_phi;

  RopeTable(MemoryTracker& tracker, std::span<const std::int64_t> positions, std::int64_t d, double theta)
      : cos_phi(tracker, MemoryCategory::transient, {static_cast<std::int64_t>(positions.size()), d / 2}),
        sin_phi(tracker, MemoryCategory::transient, {static_cast<std::int64_t>(positions.size()), d / 2}) {
    using std::cos;
    using std::pow;
    using std::sin;
    const std::int64_t half = d / 2;
    for (std::int64_t i = 0; i < half; ++i) {
      const Real inv_freq = pow(Real(theta), Real(Real(-2 * i) / Real(d)));
      for (std::size_t p = 0; p < positions.size(); ++p) {
        const Real phi = Real(positions[p]) * inv_freq;
        const auto at = static_cast<std::int64_t>(p) * half + i;
        cos_phi[at] = cos(phi);
        sin_phi[at] = sin(phi);
      }
    }
  }
  const Real* cos_row(std::int64_t p) const { return cos_phi.row(p); }
  const Real* sin_row(std::int64_t p) const { return sin_phi.row(p); }
};

// x <- RoPE(x) in place, with the angles of one position.
template <class Real>
void rope_forward(Real* x, const Real* cos_phi, const Real* sin_phi, std::int64_t d) {
  const std::int64_t half = d / 2;
  for (std::int64_t i = 0; i < half; ++i) rope_rotate(x[i], x[i + half], cos_phi[i], sin_phi[i]);
}

// dx <- R^T dx in place (dx holds dL/dx' on entry, dL/dx on exit).
template <class Real>
void rope_backward(Real* dx, const Real* cos_phi, const Real* sin_phi, std::int64_t d) {
  const std::int64_t half = d / 2;
  for (std::int64_t i = 0; i < half; ++i) rope_unrotate(dx[i], dx[i + half], cos_phi[i], sin_phi[i]);
}

}  // namespace dflash
