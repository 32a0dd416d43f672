// The host side of held-out evaluation (distributed/run/evaluation.hpp), whatever the backend's
// forward: the split of the set over ranks, the sums a rank adds and the ranks reduce, the record
// made from them, and what evaluate() asks the backend for (every sequence once, dropout off, the
// step and seq = i of SPEC §4/§6). A fake backend returns values made from the sequence, so that
// the record can be computed independently here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/tolerances.hpp"
#include "distributed/run/evaluation.hpp"
#include "distributed/run/step_backend.hpp"
#include "distributed/single_process_communicator.hpp"
#include "tests/distributed/run_test_support.hpp"
#include "tests/distributed/training_problem.hpp"

namespace dflash::train_testing {
namespace {

TEST(Evaluation, RanksSplitTheSetEverySequenceOnce) {
  for (const std::int64_t n : {0, 1, 7, 24}) {
    for (int R = 1; R <= 5; ++R) {
      std::vector<std::int64_t> all;
      for (int r = 0; r < R; ++r) {
        const std::vector<std::int64_t> mine = eval_sequences_of_rank(n, r, R);
        EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
        for (const std::int64_t i : mine) EXPECT_EQ(i % R, r) << "n " << n << " R " << R;  // i = r, r + R, ...
        all.insert(all.end(), mine.begin(), mine.end());
      }
      std::sort(all.begin(), all.end());
      std::vector<std::int64_t> want(static_cast<std::size_t>(n));
      std::iota(want.begin(), want.end(), std::int64_t(0));
      EXPECT_EQ(all, want) << "n " << n << " R " << R;
    }
  }
}

// What a fake forward returns for sequence i of a set with blocks of B = 4: unnormalised sums, W,
// counts and one block per sequence whose first i % 4 positions hit.
SequenceEvaluation fake_evaluation(std::int64_t i) {
  constexpr std::int64_t B = 4;
  SequenceEvaluation e{{}, 0.5 + 0.25 * double(i % 3), BlockStatistics(B)};
  e.stats.loss = 1.0 / double(i + 3);
  e.stats.ce = 0.7 / double(i + 2);
  e.stats.kl = 0.1 * double(i % 5);
  e.stats.correct = i % 4;
  e.stats.valid_rows = B - 1;
  const std::vector<std::uint8_t> keep{1}, valid{0, 1, 1, 1};
  std::vector<std::uint8_t> hits(B, 0);
  for (std::int64_t k = 1; k <= i % 4 && k < B; ++k) hits[std::size_t(k)] = 1;
  add_block_hits(e.blocks, B, keep, valid, hits);
  return e;
}

TEST(Evaluation, RecordIsTheSumsOverTheSet) {
  constexpr std::int64_t n = 9;
  EvalSums sums(4);
  double wl = 0, wce = 0, wkl = 0, W = 0, correct = 0, accepted = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const SequenceEvaluation e = fake_evaluation(i);
    sums.add(e, i % 3 == 0);
    wl += e.stats.loss, wce += e.stats.ce, wkl += e.stats.kl, W += e.weight_sum, correct += double(e.stats.correct);
    accepted += 1 + double(i % 4);  // the block's leading hits
  }
  const EvalRecord r = sums.record(11);
  EXPECT_EQ(r.step, 11);
  EXPECT_EQ(r.sequences, n);
  EXPECT_EQ(r.truncated_sequences, 3);
  EXPECT_EQ(r.tokens, 3 * n);
  EXPECT_DOUBLE_EQ(r.weight_sum, W);
  EXPECT_DOUBLE_EQ(r.loss, wl / W);
  EXPECT_DOUBLE_EQ(r.ce, wce / W);
  EXPECT_DOUBLE_EQ(r.kl, wkl / W);
  EXPECT_DOUBLE_EQ(r.accuracy, correct / double(3 * n));
  EXPECT_DOUBLE_EQ(r.acceptance_length, accepted / double(n));
  ASSERT_EQ(r.accuracy_by_position.size(), 3u);
  EXPECT_DOUBLE_EQ(r.accuracy_by_position[0], 6.0 / 9.0);  // i % 4 >= 1: 6 of 9
}

TEST(Evaluation, NothingLabelledGivesZerosNotNaN) {
  EvalSums sums(4);
  SequenceEvaluation e{{}, 0.0, BlockStatistics(4)};
  sums.add(e, false);
  const EvalRecord r = sums.record(0);
  EXPECT_EQ(r.sequences, 1);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.accuracy, 0.0);
  EXPECT_EQ(r.acceptance_length, 0.0);
}

// The ranks' sums added element by element (what all_reduce_sum does): the record of any R is the
// one rank's up to the order of the sums (SPEC §10: 1e-12).
TEST(Evaluation, RecordDoesNotDependOnTheNumberOfRanks) {
  constexpr std::int64_t n = 24;
  EvalSums one(4);
  for (std::int64_t i = 0; i < n; ++i) one.add(fake_evaluation(i), i % 5 == 0);
  const EvalRecord want = one.record(3);
  for (int R = 2; R <= 4; ++R) {
    std::vector<EvalSums> ranks(std::size_t(R), EvalSums(4));
    for (int r = 0; r < R; ++r) {
      for (const std::int64_t i : eval_sequences_of_rank(n, r, R))
        ranks[std::size_t(r)].add(fake_evaluation(i), i % 5 == 0);
    }
    for (int r = 1; r < R; ++r) {
      const std::span<double> from = ranks[std::size_t(r)].values(), into = ranks[0].values();
      for (std::size_t k = 0; k < into.size(); ++k) into[k] += from[k];
    }
    const EvalRecord got = ranks[0].record(3);
    EXPECT_EQ(got.sequences, want.sequences);
    EXPECT_EQ(got.truncated_sequences, want.truncated_sequences);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_LE(std::abs(got.loss - want.loss), kReferenceTolerance * std::abs(want.loss)) << R;
    EXPECT_LE(std::abs(got.ce - want.ce), kReferenceTolerance * std::abs(want.ce)) << R;
    EXPECT_LE(std::abs(got.kl - want.kl), kReferenceTolerance * std::abs(want.kl)) << R;
    EXPECT_EQ(got.accuracy, want.accuracy);
    EXPECT_EQ(got.acceptance_length, want.acceptance_length);
  }
}

// Records what evaluate() asks for and answers with fake_evaluation(seq).
class RecordingBackend final : public StepBackend {
 public:
  struct Call {
    std::int64_t sequence = 0;
    std::uint32_t step = 0;
    double attention_dropout = -1, hidden_dropout = -1;
    LossPolicy loss_policy = LossPolicy::materialize;
    TrunkPolicy trunk_policy = TrunkPolicy::none;
    std::vector<std::int64_t> tokens;
  };
  std::vector<Call> calls;

  std::int64_t completed_steps() const override { return 0; }
  SequenceEvaluation forward_statistics(const DrafterConfig& config, const DrafterBatch<double>& batch,
                                        const DrafterStepOptions& options, const Bf16Features* = nullptr) override {
    calls.push_back({options.sequence_offset, options.step, config.attention_dropout, config.hidden_dropout,
                     options.loss_policy, options.trunk_policy, batch.tokens.values()});
    EXPECT_EQ(batch.num_sequences(), 1);
    return fake_evaluation(options.sequence_offset);
  }
  StepMetrics step(std::span<const RankSequences>, const TrainStepOptions&) override {
    ADD_FAILURE() << "evaluation must not take a step";
    return {};
  }
  FlatValues gather_optimizer(OptimizerPart, bool) override { return {}; }
  safetensors::Dtype master_dtype() const override { return safetensors::Dtype::F64; }
  std::map<std::string, std::int64_t> peak_bytes() const override { return {}; }
  void reset_peaks() override {}
};

TEST(Evaluation, EverySequenceOnceWithDropoutOffAtTheStepAndItsIndex) {
  DrafterConfig config = tiny_config();
  config.attention_dropout = 0.25;  // the training config's; evaluation turns it off
  config.hidden_dropout = 0.5;
  TrainingConfig training = load_training_config(tiny_train_config_path());
  const FeatureDataset eval = FeatureDataset::open(synthetic_run_data() / "features", FeatureSetShape::of(config));
  SingleProcessCommunicator comm;
  RecordingBackend backend;
  const EvalRecord r = evaluate(comm, backend, config, training, eval, 7);

  ASSERT_EQ(std::int64_t(backend.calls.size()), eval.num_sequences());
  EvalSums want(config.block_size);
  for (std::int64_t i = 0; i < eval.num_sequences(); ++i) {
    const RecordingBackend::Call& c = backend.calls[std::size_t(i)];
    const FeatureSequence q = eval.sequence(i, training.max_context);
    EXPECT_EQ(c.sequence, i);
    EXPECT_EQ(c.step, 7u);
    EXPECT_EQ(c.attention_dropout, 0.0);
    EXPECT_EQ(c.hidden_dropout, 0.0);
    EXPECT_EQ(c.loss_policy, config.loss_policy);
    EXPECT_EQ(c.trunk_policy, config.trunk_policy);
    EXPECT_EQ(c.tokens, q.tokens) << "sequence " << i << " cut to max_context";
    want.add(fake_evaluation(i), q.truncated);
  }
  const EvalRecord expected = want.record(7);
  EXPECT_GT(expected.truncated_sequences, 0) << "the set truncates nothing: the count is untested";
  EXPECT_EQ(r.truncated_sequences, expected.truncated_sequences);
  EXPECT_EQ(r.sequences, expected.sequences);
  EXPECT_EQ(r.loss, expected.loss);
  EXPECT_EQ(r.accuracy_by_position, expected.accuracy_by_position);
}

// The reference backend's forward runs the config evaluate() gives it (dropout off), not the run's:
// with the run's dropout, every evaluation would be a noisy draw of the held-out loss.
TEST(ReferenceBackendEvaluation, TheForwardRunsTheConfigItIsGiven) {
  SingleProcessCommunicator comm;
  const TrainingConfig training = testing::tiny_training_config(4, 1, 1);
  testing::TinyTrainer tiny(comm, training);  // attention and hidden dropout on
  ASSERT_GT(tiny.config.hidden_dropout, 0.0);
  DrafterConfig off = tiny.config;
  off.attention_dropout = 0;
  off.hidden_dropout = 0;
  const std::vector<testing::SequenceData> data =
      testing::load_sequences(tiny.tracker, tiny.config, 0, {1}, testing::all_labelled);
  const DrafterStepOptions options = drafter_step_options(off, 3, 1);
  MemoryTracker scratch;
  const DrafterOutputs<double> want =
      drafter_forward(scratch, off, tiny.state.params, tiny.frozen, data[0].batch, options, std::optional<double>(1.0));
  MemoryTracker memory;
  const std::unique_ptr<StepBackend> backend =
      make_reference_step_backend(memory, comm, tiny.config, training, tiny.frozen, std::move(tiny.state));
  const SequenceEvaluation got = backend->forward_statistics(off, data[0].batch, options);
  EXPECT_EQ(got.stats.loss, want.stats.loss);
  EXPECT_EQ(got.stats.correct, want.stats.correct);
  // Not vacuous: with the run's dropout the same forward gives another loss.
  EXPECT_NE(backend->forward_statistics(tiny.config, data[0].batch, options).stats.loss, want.stats.loss);
}

}  // namespace
}  // namespace dflash::train_testing
