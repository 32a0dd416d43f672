// The bound a bf16 training run is held to on a training golden (golden/training_rule.hpp),
// on the CPU: Adam's update bound holds for any gradients and is reached, the drift bound is
// reached by two runs whose gradients have opposite signs, and on the committed golden every
// bound is a real one (below the quantity's own size, zero where precision cannot matter) that
// the plain computation it is built from meets, and that a wrong optimizer fails.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "common/adamw.hpp"
#include "golden/compare_rules.hpp"
#include "golden/training_rule.hpp"
#include "reference/compare.hpp"

namespace dflash {
namespace {

constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;

// |m_hat / sqrt(v_hat)| after the gradients g_0 .. g_t, with no epsilon (the bound's quantity).
double adam_ratio(const std::vector<double>& g) {
  double m = 0, v = 0;
  for (double x : g) {
    m = kBeta1 * m + (1 - kBeta1) * x;
    v = kBeta2 * v + (1 - kBeta2) * x * x;
  }
  const double n = double(g.size());
  return std::abs(m / (1 - std::pow(kBeta1, n))) / std::sqrt(v / (1 - std::pow(kBeta2, n)));
}

TEST(TrainingGoldenRule, AdamUpdateBoundHoldsForAnyGradientsAndIsReached) {
  EXPECT_DOUBLE_EQ(adam_update_bound(kBeta1, kBeta2, 0), 1.0);
  EXPECT_NEAR(adam_update_bound(kBeta1, kBeta2, 2), 1.0036, 1e-4);
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  for (std::int64_t t = 0; t < 6; ++t) {
    const double A = adam_update_bound(kBeta1, kBeta2, t);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<double> g(std::size_t(t + 1));
      for (double& x : g) x = normal(rng) * std::exp(3 * normal(rng));  // magnitudes over decades
      EXPECT_LE(adam_ratio(g), A * (1 + 1e-12)) << "t " << t;
    }
    // Cauchy-Schwarz is an equality for g_k proportional to (b1 / b2)^(t-k): the bound is reached.
    std::vector<double> worst(std::size_t(t + 1));
    for (std::int64_t k = 0; k <= t; ++k) worst[std::size_t(k)] = std::pow(kBeta1 / kBeta2, double(t - k));
    EXPECT_NEAR(adam_ratio(worst), A, 1e-12 * A) << "t " << t;
  }
}

TEST(TrainingGoldenRule, ParameterDriftIsReachedByGradientsOfOppositeSign) {
  TrainingConfig c;
  c.learning_rate = 0.01;
  c.min_learning_rate = 0.001;
  c.warmup_steps = 1;
  c.total_steps = 3;
  c.weight_decay = 0;
  c.adam_beta1 = kBeta1;
  c.adam_beta2 = kBeta2;
  c.adam_epsilon = kEps;
  double up = 0.5, down = 0.5, m[2] = {0, 0}, v[2] = {0, 0};
  for (std::int64_t t = 0; t < 3; ++t) {
    const double lr = learning_rate_at(t, c.learning_rate, c.min_learning_rate, c.warmup_steps, c.total_steps);
    const AdamWScalars s = adamw_scalars(lr, c.weight_decay, true, kBeta1, kBeta2, kEps, t);
    adamw_update(up, m[0], v[0], 1e-3, s);     // a gradient of one sign ...
    adamw_update(down, m[1], v[1], -1e-3, s);  // ... and the other: each update is lr_t in size
  }
  const double D = adam_parameter_drift(c, 3);
  EXPECT_LE(std::abs(up - down), D);
  EXPECT_GT(std::abs(up - down), 0.99 * D);  // the bound is not loose by more than A_t's 0.4 %
}

class CommittedGoldenRule : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    golden_ = std::make_unique<TrainingGolden>(
        read_training_golden(default_training_golden_dir() / "tiny-3-steps.safetensors"));
    tolerance_ = bf16_training_golden_tolerances(*golden_);
  }
  static void TearDownTestSuite() { golden_.reset(); }
  static double error(const GoldenResults& r, const std::string& name) {
    return relative_error(std::span<const double>(r.at(name).values),
                          std::span<const double>(golden_->results.at(name).values));
  }
  static std::unique_ptr<TrainingGolden> golden_;
  static std::map<std::string, double, std::less<>> tolerance_;
};
std::unique_ptr<TrainingGolden> CommittedGoldenRule::golden_;
std::map<std::string, double, std::less<>> CommittedGoldenRule::tolerance_;

TEST_F(CommittedGoldenRule, EveryTensorHasABound) {
  ASSERT_EQ(tolerance_.size(), golden_->results.size());
  for (const auto& [name, tol] : tolerance_) {
    if (name == "metrics/lr" || name == "metrics/weight_sum" || name == "metrics/tokens" || name == "metrics/clipped") {
      EXPECT_EQ(tol, 0) << name << ": precision cannot change it";
    } else {
      EXPECT_GT(tol, 0) << name;
    }
    // The drift bound is below every parameter tensor's own size (a result of zeros, or of the
    // wrong sign, fails), as are the losses' and the norm's.
    if (name.starts_with("final/param/") || name.starts_with("metrics/loss") || name == "metrics/ce" ||
        name == "metrics/kl" || name == "metrics/grad_norm") {
      EXPECT_LT(tol, 0.2) << name;
    }
  }
}

// The drift bound is a bound: the plain computation, whose displaced gradients flip the sign of
// many small-gradient updates, moves the parameters by less (but by more than half of it: the
// bound is not loose).
TEST_F(CommittedGoldenRule, ThePlainComputationMeetsTheDriftBound) {
  MemoryTracker tracker;
  const DrafterBatch<double>& first = golden_->batches.at(0);
  const double step =
      step_result_bound(CompareRule::bf16, golden_->config, first.num_sequences(), first.context_length(),
                        golden_->config.max_anchors * golden_->config.block_size);
  const PlainTraining plain = plain_bf16_training(tracker, *golden_, step / 2);
  double closest = 0;
  for (const auto& [name, t] : plain.results) {
    if (!name.starts_with("final/param/")) continue;
    EXPECT_LE(error(plain.results, name), tolerance_.at(name)) << name;
    closest = std::max(closest, error(plain.results, name) / tolerance_.at(name));
  }
  EXPECT_GT(closest, 0.5);
}

// A bf16 step 4 x as far off as the rule allows (twice the plain computation's displacement, held
// to 2 x the plain run's error): the moments and metrics built from it leave their bounds.
TEST_F(CommittedGoldenRule, AStepFourTimesWorseThanAllowedFails) {
  MemoryTracker tracker;
  const DrafterBatch<double>& first = golden_->batches.at(0);
  const double step =
      step_result_bound(CompareRule::bf16, golden_->config, first.num_sequences(), first.context_length(),
                        golden_->config.max_anchors * golden_->config.block_size);
  const PlainTraining worse = plain_bf16_training(tracker, *golden_, 2 * step);
  int failed = 0;
  for (const auto& [name, t] : worse.results) {
    if (error(worse.results, name) > tolerance_.at(name)) {
      ++failed;
      std::cout << "  fails: " << name << " " << error(worse.results, name) << " > " << tolerance_.at(name) << "\n";
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(error(worse.results, "metrics/grad_norm"), tolerance_.at("metrics/grad_norm"));
}

// Twice the learning rate (a schedule slip): caught beyond the lr metric itself.
TEST_F(CommittedGoldenRule, TwiceTheLearningRateFails) {
  TrainingGolden wrong = read_training_golden(default_training_golden_dir() / "tiny-3-steps.safetensors");
  wrong.training.learning_rate *= 2;
  wrong.training.min_learning_rate *= 2;
  MemoryTracker tracker;
  const PlainTraining run = plain_bf16_training(tracker, wrong, 0);
  int failed = 0;
  for (const auto& [name, t] : run.results) {
    if (name != "metrics/lr" && error(run.results, name) > tolerance_.at(name)) {
      ++failed;
      std::cout << "  fails: " << name << " " << error(run.results, name) << " > " << tolerance_.at(name) << "\n";
    }
  }
  EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace dflash
