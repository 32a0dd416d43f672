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
#include "reference/loss_head_compare.hpp"

namespace dflash {

namespace drafter_compare_detail {
template <class Real>
std::vector<const Tensor<Real>*> gradient_list(const DrafterStepResult<Real>& r) {
  std::vector<const Tensor<Real>*> list;
  r.grads.for_each([&](const std::string&, const Tensor<Real>& g) { list.push_back(&g); });
  list.push_back(&r.target_features_grad);
  return list;
}
}  // namespace drafter_compare_detail

template <class A, class B>
double drafter_outputs_error(const DrafterOutputs<A>& a, const DrafterOutputs<B>& b) {
  using namespace drafter_compare_detail;
  const double inf = std::numeric_limits<double>::infinity();
  if (a.anchors.values() != b.anchors.values() || a.keep.values() != b.keep.values()) return inf;
  // Losses and lse relative to at least the size of the log-partition functions they are made of
  // (LossHeadStats::magnitude, as reference/loss_head_compare.hpp judges them).
  const double floor = static_cast<double>(b.stats.magnitude);
  double e = loss_head_stats_error(a.stats, b.stats);
  e = std::max(e, scalar_relative_error(a.weight_sum, b.weight_sum));
  e = std::max(e, relative_error(a.hidden.span(), b.hidden.span()));
  e = std::max(e, relative_error(a.lse.span(), b.lse.span(), floor));
  e = std::max(e, relative_error(a.token_loss.span(), b.token_loss.span(), floor));
  e = std::max(e, relative_error(a.weights.span(), b.weights.span()));
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
  for (std::size_t i = 0; i < ga.size(); ++i) e = std::max(e, relative_error(ga[i]->span(), gb[i]->span()));
  return e;
}

// True when every reported quantity and gradient is bitwise identical.
template <class Real>
bool drafter_steps_identical(const DrafterStepResult<Real>& a, const DrafterStepResult<Real>& b) {
  using namespace drafter_compare_detail;
  const DrafterOutputs<Real>&x = a.outputs, &y = b.outputs;
  bool same = loss_head_stats_identical(x.stats, y.stats) && same_bits(x.weight_sum, y.weight_sum) &&
              x.anchors.values() == y.anchors.values() && x.keep.values() == y.keep.values() &&
              same_bits(x.hidden, y.hidden) && same_bits(x.lse, y.lse) && same_bits(x.token_loss, y.token_loss) &&
              same_bits(x.weights, y.weights) && x.labelled == y.labelled && x.hits == y.hits;
  const auto ga = gradient_list(a);
  const auto gb = gradient_list(b);
  same = same && ga.size() == gb.size();
  for (std::size_t i = 0; same && i < ga.size(); ++i) same = same_bits(*ga[i], *gb[i]);
  return same;
}

}  // namespace dflash
