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

template <class A, class B>
double loss_head_result_error(const LossHeadResult<A>& a, const LossHeadResult<B>& b, const GradientFloors& floors = {}) {
  // Scalars: relative to max(|value|, magnitude) (see LossHeadStats::magnitude).
  const double floor = static_cast<double>(b.stats.magnitude);
  double e = 0;
  e = std::max(e, scalar_relative_error(a.stats.loss, b.stats.loss, floor));
  e = std::max(e, scalar_relative_error(a.stats.ce, b.stats.ce, floor));
  e = std::max(e, scalar_relative_error(a.stats.kl, b.stats.kl, floor));
  e = std::max(e, scalar_relative_error(a.stats.magnitude, b.stats.magnitude));
  if (a.stats.correct != b.stats.correct || a.stats.valid_rows != b.stats.valid_rows) {
    return std::numeric_limits<double>::infinity();
  }
  auto span_of = [](const auto& t) { return std::span(t.data(), t.values().size()); };
  e = std::max(e, relative_error(span_of(a.lse), span_of(b.lse), floor));
  e = std::max(e, relative_error(span_of(a.token_loss), span_of(b.token_loss), floor));
  e = std::max(e, relative_error(span_of(a.hidden_grad), span_of(b.hidden_grad), floors.hidden));
  if (a.lm_head_grad.has_value() != b.lm_head_grad.has_value()) return std::numeric_limits<double>::infinity();
  if (a.lm_head_grad) e = std::max(e, relative_error(span_of(*a.lm_head_grad), span_of(*b.lm_head_grad), floors.lm_head));
  return e;
}

// True when every reported quantity is bitwise identical.
template <class Real>
bool loss_head_results_identical(const LossHeadResult<Real>& a, const LossHeadResult<Real>& b) {
  auto same_bits = [](const Real& x, const Real& y) {
    if constexpr (std::is_trivially_copyable_v<Real>) return std::memcmp(&x, &y, sizeof(Real)) == 0;
    else return x == y;
  };
  auto same = [&](const Tensor<Real>& x, const Tensor<Real>& y) {
    if (x.shape() != y.shape()) return false;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      if (!same_bits(x[i], y[i])) return false;
    }
    return true;
  };
  return same_bits(a.stats.loss, b.stats.loss) && same_bits(a.stats.magnitude, b.stats.magnitude) && same_bits(a.stats.ce, b.stats.ce) && same_bits(a.stats.kl, b.stats.kl) &&
         a.stats.correct == b.stats.correct && a.stats.valid_rows == b.stats.valid_rows && same(a.lse, b.lse) &&
         same(a.token_loss, b.token_loss) && same(a.hidden_grad, b.hidden_grad) &&
         a.lm_head_grad.has_value() == b.lm_head_grad.has_value() &&
         (!a.lm_head_grad || same(*a.lm_head_grad, *b.lm_head_grad));
}

}  // namespace dflash
