// Streaming statistics of one loss row over the vocabulary (SPEC §5). A row's loss and gradient
// need only these numbers, never the row of V logits at once: this is what lets every
// implementation work chunk by chunk, and what a kernel accumulates tile by tile (merge()).
//
// For student logits z, teacher logits t and temperature tau it tracks
//   max z and sum exp(z - max z)                 -> logsumexp(z), argmax z, CE
//   max z/tau and sum exp(z/tau - max)            -> logsumexp(z/tau)
//   max t/tau, sum exp(t/tau - max), and
//   sum exp(t/tau - max)*(t - z)                  -> KL(q || p_tau)
//   z[y]                                          -> CE
// Used by the double reference, its 50-digit twin, and the CUDA kernels (float).
#pragma once

#include <cstdint>

#include "common/hd.hpp"
#include "common/row_math.hpp"

namespace dflash {

// Index: the column index type (the reference: 64-bit; the CUDA kernels: 32-bit, V < 2^31).
template <class Real, class Index = std::int64_t>
struct HybridRowStats {
  Real max_z{0}, sum_z{0};    // running max of z and sum exp(z - max_z)
  Real max_zt{0}, sum_zt{0};  // the same for z/tau
  Real max_tt{0}, sum_tt{0};  // the same for t/tau
  Real q_diff{0};             // sum exp(t/tau - max_tt) * (t - z)
  Real z_label{0};            // z[y]; 0 until the label's column is seen (merging adds, exactly)
  Index argmax = -1;          // lowest index attaining max z
  Index count = 0;            // columns absorbed; 0 = empty

  // Absorb column v with student logit z and teacher logit t.
  DFLASH_HD void update(const Real& z, const Real& t, Index v, Index label, const Real& tau) {
    update_scaled(z, Real(z / tau), t, Real(t / tau), v, label);
  }

  // The same with z/tau and t/tau computed by the caller (a kernel multiplies by a precomputed
  // 1/tau). kTauIsOne: tau = 1, so the z/tau statistics are the z statistics; they are not
  // accumulated, and reuse_z_for_zt() copies them once the row is complete.
  template <bool kTauIsOne = false>
  DFLASH_HD void update_scaled(const Real& z, const Real& zt, const Real& t, const Real& tt, Index v, Index label) {
    if (count == 0) {
      max_z = z;
      sum_z = Real(1);
      max_zt = zt;
      sum_zt = Real(1);
      max_tt = tt;
      sum_tt = Real(1);
      q_diff = t - z;
      argmax = v;
    } else {
      if (z > max_z) {
        sum_z = sum_z * exp_of(Real(max_z - z)) + Real(1);
        max_z = z;
        argmax = v;
      } else {
        sum_z += exp_of(Real(z - max_z));
        if (z == max_z && v < argmax) argmax = v;
      }
      if constexpr (!kTauIsOne) {
        if (zt > max_zt) {
          sum_zt = sum_zt * exp_of(Real(max_zt - zt)) + Real(1);
          max_zt = zt;
        } else {
          sum_zt += exp_of(Real(zt - max_zt));
        }
      }
      if (tt > max_tt) {
        const Real scale = exp_of(Real(max_tt - tt));
        sum_tt = sum_tt * scale + Real(1);
        q_diff = q_diff * scale + (t - z);
        max_tt = tt;
      } else {
        const Real e = exp_of(Real(tt - max_tt));
        sum_tt += e;
        q_diff += e * (t - z);
      }
    }
    if (v == label) z_label = z;
    ++count;
  }

  DFLASH_HD void reuse_z_for_zt() {
    max_zt = max_z;
    sum_zt = sum_z;
  }

  // Combine the statistics of two disjoint column ranges (any order gives the same maths;
  // argmax ties resolve to the lowest index whichever side holds it).
  DFLASH_HD static HybridRowStats merge(const HybridRowStats& a, const HybridRowStats& b) {
    if (a.count == 0) return b;
    if (b.count == 0) return a;
    HybridRowStats r;
    r.count = a.count + b.count;
    r.z_label = a.z_label + b.z_label;
    if (a.max_z > b.max_z || (a.max_z == b.max_z && a.argmax < b.argmax)) {
      r.max_z = a.max_z;
      r.argmax = a.argmax;
    } else {
      r.max_z = b.max_z;
      r.argmax = b.argmax;
    }
    r.sum_z = a.sum_z * exp_of(Real(a.max_z - r.max_z)) + b.sum_z * exp_of(Real(b.max_z - r.max_z));
    r.max_zt = a.max_zt > b.max_zt ? a.max_zt : b.max_zt;
    r.sum_zt = a.sum_zt * exp_of(Real(a.max_zt - r.max_zt)) + b.sum_zt * exp_of(Real(b.max_zt - r.max_zt));
    r.max_tt = a.max_tt > b.max_tt ? a.max_tt : b.max_tt;
    const Real sa = exp_of(Real(a.max_tt - r.max_tt));
    const Real sb = exp_of(Real(b.max_tt - r.max_tt));
    r.sum_tt = a.sum_tt * sa + b.sum_tt * sb;
    r.q_diff = a.q_diff * sa + b.q_diff * sb;
    return r;
  }
};

// What a finished row yields: the three log-partition functions, and the row's two loss terms.
template <class Real>
struct HybridRowResult {
  Real lse_z;   // logsumexp(z)
  Real lse_zt;  // logsumexp(z/tau)
  Real lse_tt;  // logsumexp(t/tau)
  Real ce;      // logsumexp(z) - z[y]
  Real kl;      // sum q (log q - log p_tau) = sum q (t - z) / tau - lse_tt + lse_zt
};

template <class Real, class Index>
DFLASH_HD HybridRowResult<Real> finish_row(const HybridRowStats<Real, Index>& s, const Real& tau) {
  HybridRowResult<Real> r;
  r.lse_z = s.max_z + log_of(s.sum_z);
  r.lse_zt = s.max_zt + log_of(s.sum_zt);
  r.lse_tt = s.max_tt + log_of(s.sum_tt);
  r.ce = r.lse_z - s.z_label;
  r.kl = s.q_diff / s.sum_tt / tau - r.lse_tt + r.lse_zt;
  return r;
}

// dL/dz_v for one column from its probabilities p_v = softmax(z)_v, p_tau_v = softmax(z/tau)_v and
// q_v = softmax(t/tau)_v: scale * [hard (p_v - [v = y]) + soft tau (p_tau_v - q_v)], scale = w/W.
// The one formula every implementation evaluates; how it gets the three exponentials is its own
// (the reference below; the CUDA kernels by exp2 with log2 e folded into the scale).
template <class Real>
DFLASH_HD Real hybrid_logit_grad_of_probs(const Real& p, const Real& p_tau, const Real& q, bool is_label,
                                          const Real& tau, const Real& hard, const Real& soft, const Real& scale) {
  const Real onehot = is_label ? Real(1) : Real(0);
  return scale * (hard * (p - onehot) + soft * tau * (p_tau - q));
}

// The same from z, log q_v = t_v/tau - lse_tt and the row's statistics. Takes log q so that a policy
// that kept log q (chunk_retain) and one that recomputes it from t produce bitwise the same value.
template <class Real>
DFLASH_HD Real hybrid_logit_grad(const Real& z, const Real& log_q, bool is_label, const HybridRowResult<Real>& row,
                                 const Real& tau, const Real& hard, const Real& soft, const Real& scale) {
  const Real p = exp_of(Real(z - row.lse_z));
  const Real p_tau = exp_of(Real(Real(z / tau) - row.lse_zt));
  const Real q = exp_of(log_q);
  return hybrid_logit_grad_of_probs(p, p_tau, q, is_label, tau, hard, soft, scale);
}

template <class Real>
DFLASH_HD Real teacher_log_prob(const Real& t, const HybridRowResult<Real>& row, const Real& tau) {
  return t / tau - row.lse_tt;
}

}  // namespace dflash
