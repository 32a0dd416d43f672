// The distance between two drafter results: the largest relative error (reference/compare.hpp)
// over every reported quantity and gradient; counts (accuracy) and anchors must match exactly.
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "reference/compare.hpp"
#include "reference/drafter.hpp"

namespace dflash {

namespace drafter_compare_detail {
template <class T>
std::span<const T> span_of(const Tensor<T>& t) {
  return std::span<const T>(t.data(), t.values().size());
}

template <class Real>
std::vector<const Tensor<Real>*> gradient_list(const DrafterStepResult<Real>& r) {
  std::vector<const Tensor<Real>*> list;
  r.grads.for_each([&](const std::string&, const Tensor<Real>& g) { list.push_back(&g); });
  list.push_back(&r.target_features_grad);
  return list;
}

template <class Real>
bool same_bits(const Real& x, const Real& y) {
  if constexpr (std::is_trivially_copyable_v<Real>) return std::memcmp(&x, &y, sizeof(Real)) == 0;
  else return x == y;
}

template <class Real>
bool same_bits(const Tensor<Real>& x, const Tensor<Real>& y) {
  if (x.shape() != y.shape()) return false;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    if (!same_bits(x[i], y[i])) return false;
  }
  return true;
}
}  // namespace drafter_compare_detail

template <class A, class B>
double drafter_outputs_error(const DrafterOutputs<A>& a, const DrafterOutputs<B>& b) {
  using namespace drafter_compare_detail;
  const double inf = std::numeric_limits<double>::infinity();
  if (a.stats.correct != b.stats.correct || a.stats.valid_rows != b.stats.valid_rows) return inf;
  if (a.anchors.values() != b.anchors.values() || a.keep.values() != b.keep.values()) return inf;
  // Losses and lse relative to at least the size of the log-partition functions they are made of
  // (LossHeadStats::magnitude, as reference/loss_head_compare.hpp judges them).
  const double floor = static_cast<double>(b.stats.magnitude);
  double e = 0;
  e = std::max(e, scalar_relative_error(a.stats.loss, b.stats.loss, floor));
  e = std::max(e, scalar_relative_error(a.stats.ce, b.stats.ce, floor));
  e = std::max(e, scalar_relative_error(a.stats.kl, b.stats.kl, floor));
  e = std::max(e, scalar_relative_error(a.stats.magnitude, b.stats.magnitude));
  e = std::max(e, scalar_relative_error(a.weight_sum, b.weight_sum));
  e = std::max(e, relative_error(span_of(a.hidden), span_of(b.hidden)));
  e = std::max(e, relative_error(span_of(a.lse), span_of(b.lse), floor));
  e = std::max(e, relative_error(span_of(a.token_loss), span_of(b.token_loss), floor));
  e = std::max(e, relative_error(span_of(a.weights), span_of(b.weights)));
  return e;
}

// Outputs, every parameter gradient (each tensor judged on its own scale) and dL/dF.
template <class A, class B>
double drafter_step_error(const DrafterStepResult<A>& a, const DrafterStepResult<B>& b) {
  using namespace drafter_compare_detail;
  double e = drafter_outputs_error(a.outputs, b.outputs);
  const auto ga = gradient_list(a);
  const auto gb = gradient_list(b);
  if (ga.size() != gb.size()) return std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < ga.size(); ++i) e = std::max(e, relative_error(span_of(*ga[i]), span_of(*gb[i])));
  return e;
}

// True when every reported quantity and gradient is bitwise identical.
template <class Real>
bool drafter_steps_identical(const DrafterStepResult<Real>& a, const DrafterStepResult<Real>& b) {
  using namespace drafter_compare_detail;
  const DrafterOutputs<Real>&x = a.outputs, &y = b.outputs;
  bool same = same_bits(x.stats.loss, y.stats.loss) && same_bits(x.stats.ce, y.stats.ce) &&
              same_bits(x.stats.magnitude, y.stats.magnitude) &&
              same_bits(x.stats.kl, y.stats.kl) && x.stats.correct == y.stats.correct &&
              x.stats.valid_rows == y.stats.valid_rows && same_bits(x.weight_sum, y.weight_sum) &&
              x.anchors.values() == y.anchors.values() && x.keep.values() == y.keep.values() &&
              same_bits(x.hidden, y.hidden) && same_bits(x.lse, y.lse) && same_bits(x.token_loss, y.token_loss) &&
              same_bits(x.weights, y.weights);
  const auto ga = gradient_list(a);
  const auto gb = gradient_list(b);
  same = same && ga.size() == gb.size();
  for (std::size_t i = 0; same && i < ga.size(); ++i) same = same_bits(*ga[i], *gb[i]);
  return same;
}

}  // namespace dflash
