// The per-row contract of the loss head (SPEC §5, §7), shared by the reference (double, 50-digit)
// and the CUDA kernels (float): the hyperparameters a row needs, a row's token loss, and the
// layout of the three statistics forward saves for backward. Written once so that the two
// implementations cannot drift apart.
#pragma once

#include <cstdint>

#include "common/hd.hpp"
#include "common/row_stats.hpp"

namespace dflash {

// h, s and tau in the scalar an implementation computes in (reference: Real; CUDA: float).
template <class Real>
struct HybridHyper {
  Real hard;  // h
  Real soft;  // s
  Real tau;   // temperature
};

// l_i = h ce + s tau^2 kl.
template <class Real>
DFLASH_HD Real hybrid_token_loss(const HybridRowResult<Real>& row, const HybridHyper<Real>& hp) {
  return hp.hard * row.ce + hp.soft * hp.tau * hp.tau * row.kl;
}

// What forward saves per row for backward: [T, 3] = lse(z), lse(z/tau), lse(t/tau). Enough to
// rebuild dL/dz from z and t (hybrid_logit_grad); ce and kl are not needed.
inline constexpr int kSavedRowStats = 3;

template <class Real>
DFLASH_HD void save_row_stats(Real* saved, std::int64_t i, const HybridRowResult<Real>& row) {
  saved[kSavedRowStats * i] = row.lse_z;
  saved[kSavedRowStats * i + 1] = row.lse_zt;
  saved[kSavedRowStats * i + 2] = row.lse_tt;
}

template <class Real>
DFLASH_HD HybridRowResult<Real> load_row_stats(const Real* saved, std::int64_t i) {
  HybridRowResult<Real> row{};
  row.lse_z = saved[kSavedRowStats * i];
  row.lse_zt = saved[kSavedRowStats * i + 1];
  row.lse_tt = saved[kSavedRowStats * i + 2];
  return row;
}

// w_i / W, the factor of row i's gradient; 0 when W = 0 (then every weight is 0 too).
template <class Real>
DFLASH_HD Real row_grad_scale(const Real& w, const Real& weight_sum) {
  return weight_sum > Real(0) ? Real(w / weight_sum) : Real(0);
}

}  // namespace dflash
