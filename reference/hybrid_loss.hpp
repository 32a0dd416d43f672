// The hybrid loss of SPEC §5 written the way the maths reads, one row at a time, with every
// softmax materialised (two passes: max, then sum). No chunking, no streaming statistics, no
// policy: this is the oracle the loss-head policies are compared with.
//
//   l_i     = h (logsumexp z - z[y]) + s tau^2 sum_v q_v (log q_v - log p_tau,v)
//   L       = sum_i w_i l_i / W
//   dL/dz_i = (w_i/W) [ h (p - onehot(y_i)) + s tau (p_tau - q) ]
#pragma once

#include <algorithm>
#include <vector>

#include "common/row_math.hpp"
#include "reference/linalg.hpp"
#include "reference/loss_head_types.hpp"

namespace dflash {

namespace hybrid_loss_detail {
// log softmax of x/scale over one row, two passes.
template <class Real>
std::vector<Real> log_softmax(const std::vector<Real>& x, const Real& scale, Real& lse_out) {
  Real m = x[0] / scale;
  for (const Real& v : x) m = std::max(m, Real(v / scale));
  Real sum(0);
  for (const Real& v : x) sum += exp_of(Real(v / scale - m));
  lse_out = m + log_of(sum);
  std::vector<Real> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] / scale - lse_out;
  return out;
}
}  // namespace hybrid_loss_detail

template <class Real>
LossHeadResult<Real> hybrid_loss_unchunked(MemoryTracker& tracker, const LossHeadOptions& options,
                                           const Tensor<Real>& hidden, const LossHeadTargets<Real>& in,
                                           const Real& weight_sum) {
  validate_loss_head(options, hidden, in, weight_sum);
  const std::int64_t T = hidden.dim(0), H = hidden.dim(1), V = in.lm_head->dim(0);
  const HybridHyper<Real> hp = hybrid_hyper<Real>(options);
  const Real &h = hp.hard, &s = hp.soft, &tau = hp.tau, one(1);

  LossHeadResult<Real> r{{},
                         Tensor<Real>(tracker, MemoryCategory::outputs, {T}),
                         Tensor<Real>(tracker, MemoryCategory::outputs, {T}),
                         Tensor<Real>(tracker, MemoryCategory::gradients, {T, H}),
                         std::nullopt};
  if (options.lm_head_grad) r.lm_head_grad.emplace(tracker, MemoryCategory::gradients, Shape{V, H});

  std::vector<Real> z(V), t(V), dz(V);
  for (std::int64_t i = 0; i < T; ++i) {
    if (in.valid[i] == 0) continue;
    const std::int64_t y = in.labels[i];
    for (std::int64_t v = 0; v < V; ++v) {
      z[v] = dot(hidden.row(i), in.lm_head->row(v), H);
      t[v] = dot(in.teacher_hidden->row(i), in.teacher_head().row(v), H);
    }
    Real lse, lse_tau, lse_teacher;
    const std::vector<Real> log_p = hybrid_loss_detail::log_softmax(z, one, lse);
    const std::vector<Real> log_p_tau = hybrid_loss_detail::log_softmax(z, tau, lse_tau);
    const std::vector<Real> log_q = hybrid_loss_detail::log_softmax(t, tau, lse_teacher);

    const Real ce = -log_p[y];
    Real kl(0);
    for (std::int64_t v = 0; v < V; ++v) kl += exp_of(log_q[v]) * (log_q[v] - log_p_tau[v]);
    const HybridRowResult<Real> row{lse, lse_tau, lse_teacher, ce, kl};
    const Real loss_i = hybrid_token_loss(row, hp);

    r.lse[i] = lse;
    r.token_loss[i] = loss_i;
    const Real& w = in.weights[i];
    const std::int64_t argmax = std::max_element(z.begin(), z.end()) - z.begin();  // first maximum
    r.stats.add_row(w, loss_i, row, argmax == y);

    const Real scale = row_grad_scale(w, weight_sum);
    for (std::int64_t v = 0; v < V; ++v) {
      const Real onehot = v == y ? one : Real(0);
      dz[v] = scale * (h * (exp_of(log_p[v]) - onehot) + s * tau * (exp_of(log_p_tau[v]) - exp_of(log_q[v])));
    }
    matmul_ab_accumulate(dz.data(), in.lm_head->data(), r.hidden_grad.row(i), 1, H, V);
    if (r.lm_head_grad) matmul_atb_accumulate(dz.data(), hidden.row(i), r.lm_head_grad->data(), V, H, 1);
  }
  r.stats.finish(weight_sum);
  return r;
}

}  // namespace dflash
