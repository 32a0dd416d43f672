// The distance between two loss-head results: the largest relative error (reference/compare.hpp)
// over every quantity the loss head reports. Accuracy is a ratio of counts: it must match exactly.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <limits>
#include <span>

#include "reference/compare.hpp"
#include "reference/loss_head_types.hpp"

namespace dflash {

template <class A, class B>
double loss_head_result_error(const LossHeadResult<A>& a, const LossHeadResult<B>& b) {
  double e = 0;
  e = std::max(e, scalar_relative_error(a.stats.loss, b.stats.loss));
  e = std::max(e, scalar_relative_error(a.stats.ce, b.stats.ce));
  e = std::max(e, scalar_relative_error(a.stats.kl, b.stats.kl));
  if (a.stats.correct != b.stats.correct || a.stats.valid_rows != b.stats.valid_rows) {
    return std::numeric_limits<double>::infinity();
  }
  auto span_of = [](const auto& t) { return std::span(t.data(), t.values().size()); };
  e = std::max(e, relative_error(span_of(a.lse), span_of(b.lse)));
  e = std::max(e, relative_error(span_of(a.token_loss), span_of(b.token_loss)));
  e = std::max(e, relative_error(span_of(a.hidden_grad), span_of(b.hidden_grad)));
  if (a.lm_head_grad.has_value() != b.lm_head_grad.has_value()) return std::numeric_limits<double>::infinity();
  if (a.lm_head_grad) e = std::max(e, relative_error(span_of(*a.lm_head_grad), span_of(*b.lm_head_grad)));
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
  return same_bits(a.stats.loss, b.stats.loss) && same_bits(a.stats.ce, b.stats.ce) && same_bits(a.stats.kl, b.stats.kl) &&
         a.stats.correct == b.stats.correct && a.stats.valid_rows == b.stats.valid_rows && same(a.lse, b.lse) &&
         same(a.token_loss, b.token_loss) && same(a.hidden_grad, b.hidden_grad) &&
         a.lm_head_grad.has_value() == b.lm_head_grad.has_value() &&
         (!a.lm_head_grad || same(*a.lm_head_grad, *b.lm_head_grad));
}

}  // namespace dflash
