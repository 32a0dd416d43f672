// The plain bf16 computation (reference/bf16_emulation.hpp) and the SPEC §10 rule built on it
// (reference/bf16_tolerance.hpp): CPU only, run in every CI.
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "common/bf16.hpp"
#include "reference/bf16_tolerance.hpp"
#include "reference/compare.hpp"
#include "reference/hybrid_loss.hpp"

namespace dflash {
namespace {

bool is_bf16(double x) { return std::isnan(x) || double(round_to_bf16(static_cast<float>(x))) == x; }

LossHeadOptions options_with(double tau, double hard = 0.85, double soft = 0.15) {
  LossHeadOptions o;
  o.temperature = tau;
  o.hard_weight = hard;
  o.soft_weight = soft;
  return o;
}

// One row, one hidden unit: y = 1 + 2^-7, W = [1 + 2^-7; 0], G = y. Every input is a bf16 value,
// but z_0 = (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14 is not: bf16 keeps 1 + 2^-6.
struct OneRowProblem {
  MemoryTracker tracker;
  LossHeadProblem<double> p{Tensor<double>(tracker, MemoryCategory::inputs, {1, 1}, {1 + 0x1p-7}),
                            Tensor<double>(tracker, MemoryCategory::inputs, {1, 1}, {1 + 0x1p-7}),
                            Tensor<double>(tracker, MemoryCategory::frozen, {2, 1}, {1 + 0x1p-7, 0.0}),
                            {0},
                            {1.0},
                            {1},
                            1.0};
};

TEST(Bf16Emulation, DeviceFormatsAreExactlyBf16AndFp32) {
  MemoryTracker tracker;
  const LossHeadProblem<double> p =
      make_loss_head_problem<double>(tracker, {.rows = 9, .hidden = 7, .vocab = 23, .seed = 5});
  const LossHeadProblem<double> q = round_to_device_formats(tracker, p);
  for (const Tensor<double>* t : {&q.hidden, &q.teacher_hidden, &q.lm_head}) {
    for (std::int64_t e = 0; e < t->numel(); ++e) EXPECT_TRUE(is_bf16((*t)[e])) << e;
  }
  double sum = 0;
  for (std::size_t i = 0; i < q.weights.size(); ++i) {
    EXPECT_EQ(q.weights[i], double(static_cast<float>(p.weights[i])));
    sum += q.weights[i];
  }
  EXPECT_EQ(q.weight_sum, sum);
  EXPECT_EQ(q.labels, p.labels);
  EXPECT_EQ(q.valid, p.valid);
  // Rounding moved something: the random problem is not bf16 already.
  EXPECT_GT(relative_error(std::span(q.lm_head.data(), q.lm_head.values().size()),
                           std::span(p.lm_head.data(), p.lm_head.values().size())),
            0.0);
}

TEST(Bf16Emulation, RoundsEachLogitToBf16) {
  OneRowProblem one;
  MemoryTracker tracker;
  const LossHeadOptions o = options_with(1.0);
  const Bf16Emulation e = hybrid_loss_bf16_emulation(tracker, o, one.p);
  const double z0 = 1 + 0x1p-6;  // the bf16 logit; z1 = 0
  EXPECT_DOUBLE_EQ(e.result.lse[0], std::log(std::exp(z0) + 1.0));
  const LossHeadResult<double> ref = hybrid_loss_unchunked(tracker, o, one.p.hidden, one.p.targets(), one.p.weight_sum);
  const double exact_z0 = 1 + 0x1p-6 + 0x1p-14;
  EXPECT_DOUBLE_EQ(ref.lse[0], std::log(std::exp(exact_z0) + 1.0));
  EXPECT_NE(e.result.lse[0], ref.lse[0]);
}

TEST(Bf16Emulation, RoundsTheLogitGradientToBf16) {
  OneRowProblem one;
  MemoryTracker tracker;
  const LossHeadOptions o = options_with(1.0, 1.0, 0.0);  // hard only: dL/dz = p - onehot
  const Bf16Emulation e = hybrid_loss_bf16_emulation(tracker, o, one.p);
  const double z0 = 1 + 0x1p-6;
  const double p0 = std::exp(z0) / (std::exp(z0) + 1.0);
  const double dz0 = round_to_bf16(static_cast<float>(p0 - 1.0));
  const double dz1 = round_to_bf16(static_cast<float>(1.0 - p0));
  // dL/dy = dz0 W_0 + dz1 W_1, W_1 = 0
  EXPECT_DOUBLE_EQ(e.result.hidden_grad[0], dz0 * (1 + 0x1p-7) + dz1 * 0.0);
  EXPECT_NE(dz0, p0 - 1.0);  // the rounding is visible at this value
}

// Where bf16 holds every logit exactly (dyadic inputs with few terms), rounding the logits costs
// nothing: the emulation's statistics are the reference's up to double rounding.
TEST(Bf16Emulation, MatchesTheReferenceWhereLogitsAreExactInBf16) {
  MemoryTracker tracker;
  const std::int64_t T = 6, H = 2, V = 11;
  const double grid[] = {-1.0, -0.5, 0.0, 0.5, 1.0, 0.25};
  Tensor<double> y(tracker, MemoryCategory::inputs, {T, H}), g(tracker, MemoryCategory::inputs, {T, H});
  Tensor<double> w(tracker, MemoryCategory::frozen, {V, H});
  for (std::int64_t e = 0; e < T * H; ++e) {
    y[e] = grid[e % 6];
    g[e] = grid[(e * 5 + 1) % 6];
  }
  for (std::int64_t e = 0; e < V * H; ++e) w[e] = grid[(e * 7 + 3) % 6];
  LossHeadProblem<double> p{
      std::move(y),       std::move(g), std::move(w), {0, 3, 10, 4, 7, 1}, {0.5, 1.0, 0.25, 0.0, 1.0, 0.75},
      {1, 1, 1, 1, 1, 1}, 3.5};
  const LossHeadOptions o = options_with(0.5);
  const Bf16Emulation e = hybrid_loss_bf16_emulation(tracker, o, p);
  const LossHeadResult<double> ref = hybrid_loss_unchunked(tracker, o, p.hidden, p.targets(), p.weight_sum);
  const double double_rounding = 1e-13;  // two orders of summation of the same exact logits
  EXPECT_LE(scalar_relative_error(e.result.stats.loss, ref.stats.loss), double_rounding);
  EXPECT_LE(scalar_relative_error(e.result.stats.ce, ref.stats.ce), double_rounding);
  EXPECT_LE(scalar_relative_error(e.result.stats.kl, ref.stats.kl, ref.stats.magnitude), double_rounding);
  EXPECT_LE(relative_error(std::span(e.result.lse.data(), T), std::span(ref.lse.data(), T)), double_rounding);
  EXPECT_EQ(e.result.stats.correct, ref.stats.correct);
}

TEST(Bf16Emulation, CountsRowsWhoseArgmaxBf16MayFlip) {
  MemoryTracker tracker;
  // All inputs are bf16 values. Row 0 = [1, 2^-9]: logits 1 and 1 + 2^-13, apart by less than
  // bf16 can tell: ambiguous. Row 1 = [0, 1]: logits 0 and 2^-4: not.
  LossHeadProblem<double> p{Tensor<double>(tracker, MemoryCategory::inputs, {2, 2}, {1.0, 0x1p-9, 0.0, 1.0}),
                            Tensor<double>(tracker, MemoryCategory::inputs, {2, 2}, {1.0, 0x1p-9, 0.0, 1.0}),
                            Tensor<double>(tracker, MemoryCategory::frozen, {2, 2}, {1.0, 0.0, 1.0, 0x1p-4}),
                            {0, 0},
                            {1.0, 1.0},
                            {1, 1},
                            2.0};
  const Bf16Emulation e = hybrid_loss_bf16_emulation(tracker, options_with(1.0), p);
  EXPECT_EQ(e.ambiguous_argmax_rows, 1);
}

// --- The rule -------------------------------------------------------------------------------

class Bf16Rule : public ::testing::Test {
 protected:
  Bf16Rule()
      : problem_(make_loss_head_problem<double>(tracker_, {.rows = 12, .hidden = 9, .vocab = 57, .seed = 21})),
        oracle_(problem_, options_with(2.0, 0.7, 0.3)) {}

  LossHeadResult<double> copy_of(const LossHeadResult<double>& r) {
    return LossHeadResult<double>{r.stats, r.lse.clone(tracker_, MemoryCategory::outputs),
                                  r.token_loss.clone(tracker_, MemoryCategory::outputs),
                                  r.hidden_grad.clone(tracker_, MemoryCategory::gradients), std::nullopt};
  }
  const ToleranceEntry& entry(const Bf16RuleReport& report, const std::string& name) {
    for (const ToleranceEntry& e : report.entries) {
      if (e.quantity == name) return e;
    }
    throw std::logic_error("no entry " + name);
  }

  MemoryTracker tracker_;
  LossHeadProblem<double> problem_;
  Bf16RuleOracle oracle_;
};

TEST_F(Bf16Rule, TheReferenceItselfPassesWithZeroError) {
  const Bf16RuleReport report = oracle_.check(oracle_.reference());
  EXPECT_TRUE(report.ok()) << report.describe();
  EXPECT_EQ(report.worst_ratio(), 0.0);
}

TEST_F(Bf16Rule, ThePlainComputationPassesAndHasAVisibleError) {
  const Bf16RuleReport report = oracle_.check(oracle_.plain().result);
  EXPECT_TRUE(report.ok()) << report.describe();
  for (const char* q : {"loss", "lse", "token_loss", "hidden_grad"}) {
    EXPECT_GT(entry(report, q).plain_error, kFp32Floor) << q << ": bf16 rounding should dominate the floor";
  }
}

TEST_F(Bf16Rule, AnErrorBeyondTwicePlainPlusFloorFailsAndIsNamed) {
  LossHeadResult<double> bad = copy_of(oracle_.plain().result);
  const Bf16RuleReport plain = oracle_.check(bad);
  const double bound = entry(plain, "hidden_grad").bound();
  double max_ref = 0;
  for (double v : oracle_.reference().hidden_grad.values()) max_ref = std::max(max_ref, std::abs(v));
  bad.hidden_grad[0] = oracle_.reference().hidden_grad[0] + 1.5 * bound * max_ref;
  const Bf16RuleReport report = oracle_.check(bad);
  EXPECT_FALSE(report.ok());
  EXPECT_FALSE(entry(report, "hidden_grad").ok());
  EXPECT_TRUE(entry(report, "lse").ok());
  EXPECT_NE(report.describe().find("hidden_grad: error"), std::string::npos);
  EXPECT_GT(report.worst_ratio(), 1.0);
}

TEST_F(Bf16Rule, AccuracyMayDifferOnlyByAmbiguousRows) {
  LossHeadResult<double> r = copy_of(oracle_.reference());
  const std::int64_t allowed = oracle_.plain().ambiguous_argmax_rows +
                               2 * std::abs(oracle_.plain().result.stats.correct - oracle_.reference().stats.correct);
  r.stats.correct = oracle_.reference().stats.correct + allowed;
  EXPECT_TRUE(entry(oracle_.check(r), "correct").ok());
  r.stats.correct += 1;
  EXPECT_FALSE(entry(oracle_.check(r), "correct").ok());
}

TEST_F(Bf16Rule, ValidRowCountMustMatchExactly) {
  LossHeadResult<double> r = copy_of(oracle_.reference());
  r.stats.valid_rows += 1;
  EXPECT_FALSE(entry(oracle_.check(r), "valid_rows").ok());
}

}  // namespace
}  // namespace dflash
