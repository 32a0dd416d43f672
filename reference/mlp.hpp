// The SwiGLU gate of the drafter MLP (SPEC §3): act = silu(gate) * up, silu(g) = g sigmoid(g).
// The three projections around it are plain linear layers (reference/linalg.hpp). DFLASH_HD:
// the CUDA kernels apply the same formulas in float.
#pragma once

#include <cstdint>

#include "common/hd.hpp"
#include "common/row_math.hpp"

namespace dflash {

template <class Real>
DFLASH_HD Real sigmoid(const Real& x) {
  return Real(1) / (Real(1) + exp_of(Real(-x)));
}

template <class Real>
DFLASH_HD void swiglu_forward(const Real* gate, const Real* up, Real* act, std::int64_t n) {
  for (std::int64_t c = 0; c < n; ++c) act[c] = gate[c] * sigmoid(gate[c]) * up[c];
}

// d silu(g)/dg = sigmoid(g) (1 + g (1 - sigmoid(g))).
template <class Real>
DFLASH_HD void swiglu_backward(const Real* gate, const Real* up, const Real* d_act, Real* d_gate, Real* d_up,
                               std::int64_t n) {
  for (std::int64_t c = 0; c < n; ++c) {
    const Real s = sigmoid(gate[c]);
    d_up[c] = d_act[c] * (gate[c] * s);
    d_gate[c] = d_act[c] * up[c] * (s * (Real(1) + gate[c] * (Real(1) - s)));
  }
}

}  // namespace dflash
