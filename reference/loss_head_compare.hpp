// The distance between two loss-head results: the largest relative error (reference/compare.hpp)
// over every quantity the loss head reports. Accuracy is a ratio of counts: it must match exactly.
// Tensors are compared norm-wise; losses (loss, ce, kl, token loss) and lse relative to at least
// stats.magnitude, the size of the log-partition functions they are made of.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>
#include <span>

#include "reference/compare.hpp"
#include "reference/loss_head_types.hpp"

namespace dflash {

// Below these, gradient differences are rounding noise. Each dL/dz_v = (w/W)[h(p - onehot) +
// s tau (p_tau - q)] is a difference of probabilities, known to ~eps absolute (not relative: near
// a one-hot distribution 1 - p underflows), so dL/dY = sum_v dz_v W_lm[v] is known to ~eps times
// hidden = (h + s tau) max_i (w_i/W) max_c sum_v |W_lm[v,c]|, and dL/dW_lm = sum_i dz_i y_i to
// ~eps times lm_head = (h + s tau) max_c sum_i (w_i/W) |y_i[c]|. For unsaturated rows the
// gradients are of this size anyway; with saturated ones the floor keeps the comparison honest.
struct GradientFloors {
  double hidden = 0;
  double lm_head = 0;
};

template <class Real>
GradientFloors gradient_floors(const LossHeadOptions& o, const Tensor<Real>& hidden, const LossHeadTargets<Real>& in,
                               const Real& weight_sum) {
  GradientFloors f;
  if (!(weight_sum > 0)) return f;
  const double W = static_cast<double>(weight_sum), coeff = o.hard_weight + o.soft_weight * o.temperature;
  const std::int64_t T = hidden.dim(0), H = hidden.dim(1), V = in.lm_head->dim(0);
  double max_w = 0;
  for (const Real& w : in.weights) max_w = std::max(max_w, static_cast<double>(w) / W);
  for (std::int64_t c = 0; c < H; ++c) {
    double head_col = 0, rows_col = 0;
    for (std::int64_t v = 0; v < V; ++v) head_col += std::abs(static_cast<double>(in.lm_head->row(v)[c]));
    for (std::int64_t i = 0; i < T; ++i) {
      rows_col += static_cast<double>(in.weights[i]) / W * std::abs(static_cast<double>(hidden.row(i)[c]));
    }
    f.hidden = std::max(f.hidden, coeff * max_w * head_col);
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
double loss_head_result_error(const LossHeadResult<A>& a, const LossHeadResult<B>& b, const GradientFloors& floors = {}) {
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
  return loss_head_stats_identical(a.stats, b.stats) && same_bits(a.lse, b.lse) && same_bits(a.token_loss, b.token_loss) &&
         same_bits(a.hidden_grad, b.hidden_grad) && a.lm_head_grad.has_value() == b.lm_head_grad.has_value() &&
         (!a.lm_head_grad || same_bits(*a.lm_head_grad, *b.lm_head_grad));
}

}  // namespace dflash
