// The rotation of one RoPE pair (SPEC §3): for i < d/2, (x[i], x[i+d/2]) turns by the angle
// phi = p theta^(-2i/d). Shared by the reference (any Real) and the CUDA kernels (float).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hd.hpp"

namespace dflash {

// (a, b) <- (a cos - b sin, b cos + a sin)
template <class Real>
DFLASH_HD void rope_rotate(Real& a, Real& b, const Real& cos_phi, const Real& sin_phi) {
  const Real x = a, y = b;
  a = x * cos_phi - y * sin_phi;
  b = y * cos_phi + x * sin_phi;
}

// The transposed rotation (backward): (da, db) <- (da cos + db sin, db cos - da sin).
template <class Real>
DFLASH_HD void rope_unrotate(Real& da, Real& db, const Real& cos_phi, const Real& sin_phi) {
  const Real x = da, y = db;
  da = x * cos_phi + y * sin_phi;
  db = y * cos_phi - x * sin_phi;
}

// phi for position p and pair i of a d-vector, in double: at p ~ 4e4 a float angle would be off
// by ~4e-3 rad before its cosine is even taken. Kernels round cos and sin of it to float.
DFLASH_HD inline double rope_angle(std::int64_t position, std::int64_t i, std::int64_t d, double theta) {
  return static_cast<double>(position) * pow(theta, static_cast<double>(-2 * i) / static_cast<double>(d));
}

}  // namespace dflash
