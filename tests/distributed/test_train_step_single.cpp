// One rank, the whole step against TRAINING §11–§12 written out by hand in this file (not with
// common/adamw.hpp): W summed over the global batch first, each sequence's gradient from
// drafter_step with that W and its global index g, the sum, the norm, the clipping factor, the
// schedule and AdamW (decay on matrices only), for two steps, under ZeRO-0 and ZeRO-1.
#include <cmath>
#include <optional>

#include <gtest/gtest.h>

#include "common/tolerances.hpp"
#include "distributed/single_process_communicator.hpp"
#include "reference/compare.hpp"
#include "tests/distributed/training_problem.hpp"

namespace dflash::testing {
namespace {

struct HandState {
  std::vector<std::vector<double>> theta, m, v;  // per tensor, canonical order
};

void hand_step(const DrafterConfig& config, const TrainingConfig& tc, const FrozenWeights<double>& frozen,
               const std::vector<SequenceData>& data, std::int64_t t, HandState& s, double& norm_out,
               LossHeadStats<double>& stats_out, double& weight_sum_out) {
  MemoryTracker tracker;
  DrafterParameters<double> params = make_drafter_parameters<double>(tracker, config, MemoryCategory::parameters);
  std::size_t k = 0;
  params.for_each([&](const std::string&, Tensor<double>& x) {
    std::copy(s.theta[k].begin(), s.theta[k].end(), x.data());
    ++k;
  });
  double W = 0;
  for (const SequenceData& d : data)
    W += drafter_weight_sum(config, d.batch, drafter_step_options(config, std::uint32_t(t), std::uint32_t(d.g)));
  std::vector<std::vector<double>> g(s.theta.size());
  for (std::size_t i = 0; i < g.size(); ++i) g[i].assign(s.theta[i].size(), 0.0);
  for (const SequenceData& d : data) {
    const DrafterStepResult<double> r =
        drafter_step(tracker, config, params, frozen, d.batch,
                     drafter_step_options(config, std::uint32_t(t), std::uint32_t(d.g)), std::optional<double>(W));
    stats_out.loss += r.outputs.stats.loss;
    stats_out.correct += r.outputs.stats.correct;
    stats_out.valid_rows += r.outputs.stats.valid_rows;
    std::size_t i = 0;
    r.grads.for_each([&](const std::string&, const Tensor<double>& x) {
      for (std::int64_t e = 0; e < x.numel(); ++e) g[i][std::size_t(e)] += x[e];
      ++i;
    });
  }
  double sq = 0;
  for (const auto& x : g)
    for (double y : x) sq += y * y;
  const double n = std::sqrt(sq), c = tc.max_grad_norm / (n + 1e-6);
  norm_out = n;
  weight_sum_out = W;
  const double pi = std::acos(-1.0);
  const double lr = t < tc.warmup_steps ? tc.learning_rate * double(t + 1) / double(tc.warmup_steps)
                    : t >= tc.total_steps
                        ? tc.min_learning_rate
                        : tc.min_learning_rate +
                              0.5 * (tc.learning_rate - tc.min_learning_rate) *
                                  (1 + std::cos(pi * double(t - tc.warmup_steps) /
                                                double(std::max<std::int64_t>(1, tc.total_steps - tc.warmup_steps))));
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool matrix = shapes[i].shape.size() == 2;
    for (std::size_t e = 0; e < g[i].size(); ++e) {
      const double grad = tc.max_grad_norm > 0 && c < 1 ? g[i][e] * c : g[i][e];
      double& th = s.theta[i][e];
      double& m = s.m[i][e];
      double& v = s.v[i][e];
      if (matrix) th *= 1 - lr * tc.weight_decay;
      m = tc.adam_beta1 * m + (1 - tc.adam_beta1) * grad;
      v = tc.adam_beta2 * v + (1 - tc.adam_beta2) * grad * grad;
      th -= lr / (1 - std::pow(tc.adam_beta1, double(t + 1))) * m /
            (std::sqrt(v) / std::sqrt(1 - std::pow(tc.adam_beta2, double(t + 1))) + tc.adam_epsilon);
    }
  }
}

void expect_tensors_close(const std::vector<std::vector<double>>& want, const Tensor<double>& got, std::int64_t offset,
                          const FlatLayout& layout, const char* what) {
  for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
    const FlatTensor& t = layout.tensors()[i];
    const std::span<const double> mine(got.data() + t.offset - offset, static_cast<std::size_t>(t.numel));
    EXPECT_LE(relative_error(mine, std::span<const double>(want[i])), kReferenceTolerance) << what << " " << t.name;
  }
}

void check_against_hand(int zero, std::optional<double> decay) {
  const TrainingConfig tc = tiny_training_config(4, 2, zero);
  SingleProcessCommunicator comm;
  DrafterConfig decayed = tiny_drafter_config();
  decayed.loss_decay_gamma = decay;  // with decay, W is not the count of labelled rows
  TinyTrainer tiny(comm, tc, decayed);
  const DrafterConfig& config = tiny.config;
  MemoryTracker& tracker = tiny.tracker;
  const FrozenWeights<double>& frozen = tiny.frozen;
  TrainingState& state = tiny.state;
  HandState hand;
  state.params.for_each([&](const std::string&, const Tensor<double>& x) {
    hand.theta.push_back(x.values());
    hand.m.emplace_back(x.values().size(), 0.0);
    hand.v.emplace_back(x.values().size(), 0.0);
  });
  const FlatLayout layout(config, 1, zero);
  for (std::int64_t t = 0; t < 2; ++t) {
    const std::vector<SequenceData> data = load_sequences(tracker, config, t, {0, 1, 2, 3}, all_labelled);
    const StepMetrics metrics = train_step(tracker, comm, config, tc, frozen, state, as_rank_sequences(data));
    double norm = 0, W = 0;
    LossHeadStats<double> stats;
    hand_step(config, tc, frozen, data, t, hand, norm, stats, W);
    EXPECT_LE(std::abs(metrics.grad_norm - norm) / norm, kReferenceTolerance) << "t = " << t;
    // Metrics (TRAINING §17): the loss over W; accuracy and tokens over the labelled rows, not W
    // (the decay weights make W differ from their count).
    EXPECT_LE(std::abs(metrics.loss - stats.loss) / std::abs(stats.loss), kReferenceTolerance) << "t = " << t;
    EXPECT_LE(std::abs(metrics.weight_sum - W) / W, kReferenceTolerance) << "t = " << t;
    ASSERT_GT(stats.valid_rows, 0);
    if (decay) {
      EXPECT_NE(W, double(stats.valid_rows));
    }
    EXPECT_EQ(metrics.tokens, stats.valid_rows) << "t = " << t;
    EXPECT_EQ(metrics.accuracy, double(stats.correct) / double(stats.valid_rows)) << "t = " << t;
    EXPECT_EQ(metrics.clipped, norm + 1e-6 > tc.max_grad_norm);
    expect_tensors_close(hand.theta, state.optimizer.master, 0, layout, "master");
    expect_tensors_close(hand.m, state.optimizer.exp_avg, 0, layout, "exp_avg");
    expect_tensors_close(hand.v, state.optimizer.exp_avg_sq, 0, layout, "exp_avg_sq");
    std::size_t i = 0;
    state.params.for_each([&](const std::string& name, const Tensor<double>& x) {
      EXPECT_LE(relative_error(x.span(), std::span<const double>(hand.theta[i++])), kReferenceTolerance) << name;
    });
  }
  EXPECT_EQ(state.optimizer.step, 2);
}

TEST(TrainStepSingleRank, ZeroZeroMatchesTheFormulasWrittenOut) {
  check_against_hand(0, std::nullopt);
  check_against_hand(0, 2.0);
}
TEST(TrainStepSingleRank, ZeroOneMatchesTheFormulasWrittenOut) {
  check_against_hand(1, std::nullopt);
  check_against_hand(1, 2.0);
}

}  // namespace
}  // namespace dflash::testing

namespace dflash::testing {
namespace {

// Bad input to a step, one case each, refused before anything changes.
TEST(TrainStepSingleRank, ABucketBelowOneByteIsRefused) {
  SingleProcessCommunicator comm;
  const TrainingConfig tc = tiny_training_config(2, 1, 0);
  TinyTrainer tiny(comm, tc);
  const std::vector<SequenceData> data = load_sequences(tiny.tracker, tiny.config, 0, {0, 1}, all_labelled);
  try {
    train_step(tiny.tracker, comm, tiny.config, tc, tiny.frozen, tiny.state, as_rank_sequences(data),
               {.bucket_bytes = 0});
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bucket_bytes: 0 must be at least 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(tiny.state.optimizer.step, 0);
}

TEST(TrainStepSingleRank, AnOptimizerStateOfAnotherLayoutIsRefused) {
  SingleProcessCommunicator comm;
  TinyTrainer tiny(comm, tiny_training_config(2, 1, 0));       // ZeRO-0: P elements
  const TrainingConfig zero1 = tiny_training_config(2, 1, 1);  // ZeRO-1: P padded
  const std::vector<SequenceData> data = load_sequences(tiny.tracker, tiny.config, 0, {0, 1}, all_labelled);
  EXPECT_THROW(train_step(tiny.tracker, comm, tiny.config, zero1, tiny.frozen, tiny.state, as_rank_sequences(data)),
               InputError);
}

TEST(TrainStepSingleRank, InitialParametersOfAnotherConfigAreRefused) {
  SingleProcessCommunicator comm;
  MemoryTracker tracker;
  DrafterConfig other = tiny_drafter_config();
  other.intermediate_size = 7;
  EXPECT_THROW(make_training_state(tracker, tiny_drafter_config(), tiny_training_config(2, 1, 0), comm,
                                   init_drafter_parameters<double>(tracker, other, 3)),
               InputError);
}

TEST(TrainStepSingleRank, ExplicitAnchorsAndOverlongSequencesAreRefused) {
  SingleProcessCommunicator comm;
  const TrainingConfig tc = tiny_training_config(1, 1, 0);
  TinyTrainer tiny(comm, tc);
  const DrafterBatch<double> anchored = make_drafter_batch<double>(
      tiny.tracker, tiny.config, {.sequences = 1, .context_length = 10, .explicit_anchors = true});
  const DrafterBatch<double> too_long =
      make_drafter_batch<double>(tiny.tracker, tiny.config, {.sequences = 1, .context_length = tc.max_context + 1});
  for (const DrafterBatch<double>* b : {&anchored, &too_long}) {
    const RankSequences s{0, b};
    EXPECT_THROW(train_step(tiny.tracker, comm, tiny.config, tc, tiny.frozen, tiny.state, {&s, 1}), InputError);
  }
}

}  // namespace
}  // namespace dflash::testing
