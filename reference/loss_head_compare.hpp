// The distance between two loss-head results: the largest relative error (reference/compare.hpp)
// over every quantity the loss head reports. Accuracy is a ratio of counts: it must match exactly.
// Tensors are compared norm-wise; losses (loss, ce, kl, token loss) and lse relative to at least
// stats.magnitude, the size of the log-partition functions they are made of.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "reference/compare.hpp"
#include "reference/loss_head_types.hpp"

namespace dflash {

// Below these, gradient differences are rounding noise (each floor is a scale S: the gradient's
// entries are known to a few eps times S, so a comparison at 1e-9 or 1e-12 judges against S).
//
// dL/dY. Row i's dL/dz_v = (w_i/W)[h (p_v - onehot_v) + s tau (p_tau,v - q_v)] is a difference of
// probabilities, known to ~eps absolute, not relative (near a one-hot distribution 1 - p
// underflows). Each p_v = exp(z_v - lse) is rounded to eps p_v, and its argument, a difference of
// numbers of size |lse| (the p_v that matter have z_v near lse), to ~eps |lse|: so |dp_v| <~
// eps p_v (1 + |lse|), and summed against a column of W_lm, |sum_v dp_v W_lm[v,c]| <~
// eps (1 + |lse|) max_v |W_lm[v,c]| because sum_v p_v = 1. The same for p_tau (lse(z/tau)) and q
// (lse(t/tau)), whence
//   hidden = max_{v,c} |W_lm[v,c]| max_i (w_i/W) [h (1 + |lse(z_i)|) + s tau (2 + |lse(z_i/tau)| + |lse(t_i/tau)|)].
// This does not grow with V (a sum over v of |W_lm[v,c]| would: at V = 4096 that floor is ~10^3
// times max |dL/dY| itself, and hides real errors). The rounding of the V-term sums themselves is
// at most ~V eps sum_v |dz_v W_lm[v,c]| <= 2 V eps (h + s tau)(w/W) max|W_lm|, far below the checks'
// 1e-9 of this floor for any vocabulary (V < 10^6).
//
// dL/dW_lm = sum_i dz_i y_i is known to ~eps times lm_head = (h + s tau) max_c sum_i (w_i/W) |y_i[c]|.
// For unsaturated rows the gradients are of these sizes anyway; with saturated ones the floor keeps
// the comparison honest.
struct GradientFloors {
  double hidden = 0;
  double lm_head = 0;
};

namespace loss_head_compare_detail {
// logsumexp over v of scale * (row . W_lm[v]), in double.
template <class Real>
double row_logsumexp(const Real* row, const Tensor<Real>& head, double scale) {
  const std::int64_t V = head.dim(0), H = head.dim(1);
  std::vector<double> logits(static_cast<std::size_t>(V));
  double top = -std::numeric_limits<double>::infinity();
  for (std::int64_t v = 0; v < V; ++v) {
    double z = 0;
    for (std::int64_t c = 0; c < H; ++c) z += static_cast<double>(row[c]) * static_cast<double>(head.row(v)[c]);
    logits[static_cast<std::size_t>(v)] = scale * z;
    top = std::max(top, scale * z);
  }
  double sum = 0;
  for (double z : logits) sum += std::exp(z - top);
  return top + std::log(sum);
}
}  // namespace loss_head_compare_detail

template <class Real>
GradientFloors gradient_floors(const LossHeadOptions& o, const Tensor<Real>& hidden, const LossHeadTargets<Real>& in,
                               const Real& weight_sum) {
  using loss_head_compare_detail::row_logsumexp;
  GradientFloors f;
  if (!(weight_sum > 0)) return f;
  const double W = static_cast<double>(weight_sum), h = o.hard_weight, s = o.soft_weight, tau = o.temperature;
  const std::int64_t T = hidden.dim(0), H = hidden.dim(1), V = in.lm_head->dim(0);
  double max_head = 0;
  for (std::int64_t e = 0; e < V * H; ++e)
    max_head = std::max(max_head, std::abs(static_cast<double>((*in.lm_head)[e])));
  double row_scale = 0;
  for (std::int64_t i = 0; i < T; ++i) {
    if (in.valid[static_cast<std::size_t>(i)] == 0) continue;
    const double lse_z = row_logsumexp(hidden.row(i), *in.lm_head, 1.0);
    const double lse_zt = row_logsumexp(hidden.row(i), *in.lm_head, 1.0 / tau);
    const double lse_tt = row_logsumexp(in.teacher_hidden->row(i), in.teacher_head(), 1.0 / tau);
    const double rounding = h * (1 + std::abs(lse_z)) + s * tau * (2 + std::abs(lse_zt) + std::abs(lse_tt));
    row_scale = std::max(row_scale, static_cast<double>(in.weights[static_cast<std::size_t>(i)]) / W * rounding);
  }
  f.hidden = max_head * row_scale;
  const double coeff = h + s * tau;
  for (std::int64_t c = 0; c < H; ++c) {
    double rows_col = 0;
    for (std::int64_t i = 0; i < T; ++i) {
      rows_col += static_cast<double>(in.weights[i]) / W * std::abs(static_cast<double>(hidden.row(i)[c]));
    }
    f.lm_head = std::max(f.lm_head, coeff * rows_col);
  }
  return f;
}

// Loss, ce, kl relative to max(|value|, magnitude) (see LossHeadStats::magnitude); the counts
// behind accuracy must match exactly (infinity otherwise).
template <class A, class B>
double loss_head_stats_error(const LossHeadStats<A>& a, const LossHeadStats<B>& b) {
  if (a.correct != b.correct || a.valid_rows != b.valid_rows) return std::numeric_limits<double>::infinity();
  const double floor = static_cast<double>(b.magnitude);
  double e = 0;
  e = std::max(e, scalar_relative_error(a.loss, b.loss, floor));
  e = std::max(e, scalar_relative_error(a.ce, b.ce, floor));
  e = std::max(e, scalar_relative_error(a.kl, b.kl, floor));
  e = std::max(e, scalar_relative_error(a.magnitude, b.magnitude));
  return e;
}

template <class Real>
bool loss_head_stats_identical(const LossHeadStats<Real>& a, const LossHeadStats<Real>& b) {
  return same_bits(a.loss, b.loss) && same_bits(a.ce, b.ce) && same_bits(a.kl, b.kl) &&
         same_bits(a.magnitude, b.magnitude) && a.correct == b.correct && a.valid_rows == b.valid_rows;
}

template <class A, class B>
double loss_head_result_error(const LossHeadResult<A>& a, const LossHeadResult<B>& b,
                              const GradientFloors& floors = {}) {
  const double floor = static_cast<double>(b.stats.magnitude);
  double e = loss_head_stats_error(a.stats, b.stats);
  e = std::max(e, relative_error(a.lse.span(), b.lse.span(), floor));
  e = std::max(e, relative_error(a.token_loss.span(), b.token_loss.span(), floor));
  e = std::max(e, relative_error(a.hidden_grad.span(), b.hidden_grad.span(), floors.hidden));
  if (a.lm_head_grad.has_value() != b.lm_head_grad.has_value()) return std::numeric_limits<double>::infinity();
  if (a.lm_head_grad) e = std::max(e, relative_error(a.lm_head_grad->span(), b.lm_head_grad->span(), floors.lm_head));
  return e;
}

// True when every reported quantity is bitwise identical.
template <class Real>
bool loss_head_results_identical(const LossHeadResult<Real>& a, const LossHeadResult<Real>& b) {
  return loss_head_stats_identical(a.stats, b.stats) && same_bits(a.lse, b.lse) &&
         same_bits(a.token_loss, b.token_loss) && same_bits(a.hidden_grad, b.hidden_grad) &&
         a.lm_head_grad.has_value() == b.lm_head_grad.has_value() &&
         (!a.lm_head_grad || same_bits(*a.lm_head_grad, *b.lm_head_grad));
}

}  // namespace dflash
