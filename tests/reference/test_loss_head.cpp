// Loss-head behaviour that is not a random property: determinism, W = 0, the backward contract.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <utility>

#include <gtest/gtest.h>

#include "reference/loss_head.hpp"
#include "reference/loss_head_compare.hpp"
#include "reference/loss_head_problem.hpp"

namespace dflash {
namespace {

LossHeadOptions options_for(LossPolicy policy, std::int64_t chunk) {
  LossHeadOptions o;
  o.policy = policy;
  o.chunk_rows = chunk;
  o.lm_head_grad = true;
  o.temperature = 0.7;
  return o;
}

TEST(LossHead, SameInputsGiveBitwiseSameResultsOnEveryRun) {
  MemoryTracker data, t1, t2;
  const auto p = make_loss_head_problem<double>(data, {.rows = 11, .hidden = 6, .vocab = 30, .seed = 5});
  for (LossPolicy policy : kAllLossPolicies) {
    const auto a = run_loss_head(t1, options_for(policy, 4), p.hidden, p.targets(), p.weight_sum);
    const auto b = run_loss_head(t2, options_for(policy, 4), p.hidden, p.targets(), p.weight_sum);
    EXPECT_TRUE(loss_head_results_identical(a, b)) << loss_policy_name(policy);
  }
}

TEST(LossHead, ZeroTotalWeightGivesExactlyZeroLossAndGradients) {
  MemoryTracker data, t;
  const auto p =
      make_loss_head_problem<double>(data, {.rows = 7, .hidden = 5, .vocab = 13, .seed = 8, .all_weights_zero = true});
  ASSERT_EQ(p.weight_sum, 0.0);
  for (LossPolicy policy : kAllLossPolicies) {
    const auto r = run_loss_head(t, options_for(policy, 3), p.hidden, p.targets(), p.weight_sum);
    EXPECT_EQ(r.stats.loss, 0.0);
    EXPECT_EQ(r.stats.ce, 0.0);
    EXPECT_EQ(r.stats.kl, 0.0);
    for (double g : r.hidden_grad.values()) EXPECT_EQ(g, 0.0);
    for (double g : r.lm_head_grad->values()) EXPECT_EQ(g, 0.0);
  }
}

TEST(LossHead, AccuracyCountsArgmaxHitsOverLabelledRows) {
  // One row whose label is the argmax, one whose label is not, one without a label.
  MemoryTracker t;
  Tensor<double> hidden(t, MemoryCategory::inputs, {3, 1}, {1, 1, 1});
  Tensor<double> teacher(t, MemoryCategory::inputs, {3, 1}, {1, 1, 1});
  Tensor<double> head(t, MemoryCategory::frozen, {3, 1}, {0.5, 2.0, 2.0});  // ties: columns 1 and 2
  const std::vector<std::int64_t> labels{1, 2, 0};
  const std::vector<double> weights{1, 1, 0};
  const std::vector<std::uint8_t> valid{1, 1, 0};
  const LossHeadTargets<double> targets{&teacher, &head, nullptr, labels, weights, valid};
  const auto r = run_loss_head(t, options_for(LossPolicy::chunk_recompute, 2), hidden, targets, 2.0);
  EXPECT_EQ(r.stats.valid_rows, 2);
  EXPECT_EQ(r.stats.correct, 1);  // argmax ties resolve to the lowest index (1)
  EXPECT_EQ(r.stats.accuracy(), 0.5);
  EXPECT_EQ(r.token_loss[2], 0.0);
  EXPECT_EQ(r.lse[2], 0.0);
}

TEST(LossHead, BackwardRejectsAnotherPolicysSavedState) {
  MemoryTracker data, t;
  const auto p = make_loss_head_problem<double>(data, {.rows = 4, .hidden = 3, .vocab = 7, .seed = 2});
  auto f = loss_head_forward(t, options_for(LossPolicy::chunk_recompute, 2), p.hidden, p.targets(), p.weight_sum);
  EXPECT_THROW(loss_head_backward(t, options_for(LossPolicy::chunk_retain, 2), p.targets(), std::move(f.saved)),
               InputError);
}

TEST(LossHead, BackwardReleasesEverythingItWasHanded) {
  MemoryTracker data;
  const auto p = make_loss_head_problem<double>(data, {.rows = 9, .hidden = 4, .vocab = 11, .seed = 4});
  for (LossPolicy policy : kAllLossPolicies) {
    MemoryTracker t;
    auto f = loss_head_forward(t, options_for(policy, 4), p.hidden, p.targets(), p.weight_sum);
    EXPECT_GT(t.current(MemoryCategory::loss_saved), 0u);
    auto g = loss_head_backward(t, options_for(policy, 4), p.targets(), std::move(f.saved));
    EXPECT_EQ(t.current(MemoryCategory::loss_saved), 0u) << loss_policy_name(policy);
    EXPECT_EQ(t.current(MemoryCategory::transient), 0u) << loss_policy_name(policy);
  }
}

TEST(LossHead, EmptyBatchIsValid) {
  MemoryTracker data, t;
  const auto p = make_loss_head_problem<double>(data, {.rows = 0, .hidden = 3, .vocab = 5, .seed = 1});
  for (LossPolicy policy : kAllLossPolicies) {
    const auto r = run_loss_head(t, options_for(policy, 2), p.hidden, p.targets(), p.weight_sum);
    EXPECT_EQ(r.stats.loss, 0.0);
    EXPECT_EQ(r.hidden_grad.numel(), 0);
  }
}

// The dL/dY floor bounds rounding, not the gradient: it must not grow with V. A floor made of a
// sum over v of |W_lm[v,c]| is ~10^3 times max |dL/dY| at V = 4096 (and would turn the FD checks'
// 1e-9 into ~1e-6); this one is (1 + |lse|) ~ 10 times it, and that ratio grows only like log V.
TEST(GradientFloors, HiddenFloorDoesNotGrowWithTheVocabulary) {
  LossHeadOptions o = options_for(LossPolicy::chunk_recompute, 4);
  auto floor_over_gradient = [&](std::int64_t vocab) {
    MemoryTracker data, tracker;
    const auto p = make_loss_head_problem<double>(data, {.rows = 8, .hidden = 16, .vocab = vocab, .seed = 41});
    const auto r = run_loss_head(tracker, o, p.hidden, p.targets(), p.weight_sum);
    double max_grad = 0;
    for (double g : r.hidden_grad.values()) max_grad = std::max(max_grad, std::abs(g));
    const double floor = gradient_floors(o, p.hidden, p.targets(), p.weight_sum).hidden;
    std::cout << "V = " << vocab << ": dL/dY floor " << floor << ", max |dL/dY| " << max_grad << "\n";
    return floor / max_grad;
  };
  const double small = floor_over_gradient(256), large = floor_over_gradient(4096);
  EXPECT_LT(large, 50.0);
  EXPECT_GT(large, 1.0);          // still above the gradient's scale: saturated rows stay covered
  EXPECT_LT(large / small, 2.0);  // 16 times the vocabulary; a sum over v would grow ~16 times
}

}  // namespace
}  // namespace dflash
