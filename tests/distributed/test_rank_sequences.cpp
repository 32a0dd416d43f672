// A rank's sequences with F and G held in bf16 until their turn (distributed/rank_sequences.hpp):
// the tests' rounding (tests/distributed/bf16_features.hpp) is the CUDA upload's, bit for bit, and
// leaves the batch its tokens; W and its validation see the bf16 values; the turn widens them exactly; and
// a reference step handed them is bitwise the step handed their doubles. (That the CUDA step is
// bitwise the same either way is train_step_cases.hpp's, on the CPU twin and the GPU.)
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "distributed/rank_sequences.hpp"
#include "distributed/single_process_communicator.hpp"
#include "distributed/train_step.hpp"
#include "tests/distributed/bf16_features.hpp"
#include "tests/distributed/training_problem.hpp"
#include "tests/planner/expect_input_error.hpp"

namespace dflash::testing {
namespace {

DrafterBatch<double> tiny_batch(MemoryTracker& tracker, std::int64_t sequences, std::uint64_t seed) {
  return make_drafter_batch<double>(tracker, tiny_drafter_config(),
                                    {.sequences = sequences, .context_length = 12, .seed = seed});
}

// `batch` with F and G replaced by their bf16 values in double: what the CUDA upload sees.
DrafterBatch<double> rounded_in_double(MemoryTracker& tracker, const DrafterBatch<double>& batch) {
  DrafterBatch<double> r = convert_batch<double>(tracker, batch);
  for (Tensor<double>* x : {&r.target_features, &r.teacher_hidden}) {
    for (std::int64_t e = 0; e < x->numel(); ++e) (*x)[e] = double(round_to_bf16(float((*x)[e])));
  }
  return r;
}

TEST(RankSequences, RoundingIsTheUploadsAndLeavesTheBatchItsTokens) {
  MemoryTracker tracker;
  DrafterBatch<double> batch = tiny_batch(tracker, 2, 7);
  const DrafterBatch<double> original = convert_batch<double>(tracker, batch);
  const std::size_t before = tracker.current(MemoryCategory::inputs);
  const Bf16Features f = round_features_to_bf16(tracker, batch);

  const std::vector<Bf16Bits> F = bf16_bits_of(original.target_features.data(), original.target_features.numel());
  const std::vector<Bf16Bits> G = bf16_bits_of(original.teacher_hidden.data(), original.teacher_hidden.numel());
  EXPECT_EQ(f.target_features.shape(), original.target_features.shape());
  EXPECT_EQ(f.teacher_hidden.shape(), original.teacher_hidden.shape());
  EXPECT_EQ(std::vector<Bf16Bits>(f.target_features.data(), f.target_features.data() + F.size()), F);
  EXPECT_EQ(std::vector<Bf16Bits>(f.teacher_hidden.data(), f.teacher_hidden.data() + G.size()), G);
  EXPECT_EQ(batch.target_features.numel(), 0);
  EXPECT_EQ(batch.teacher_hidden.numel(), 0);
  EXPECT_EQ(std::vector<std::int64_t>(batch.tokens.data(), batch.tokens.data() + batch.tokens.numel()),
            std::vector<std::int64_t>(original.tokens.data(), original.tokens.data() + original.tokens.numel()));
  EXPECT_EQ(batch.loss_mask.shape(), original.loss_mask.shape());
  // A quarter of the doubles' bytes: F and G went from 8 bytes a value to 2.
  const auto values = std::size_t(F.size() + G.size());
  EXPECT_EQ(before - tracker.current(MemoryCategory::inputs), values * (8 - 2));
}

TEST(RankSequences, WeightSumIsTheBatchsAndValidatesWhatItHolds) {
  const DrafterConfig config = tiny_drafter_config();
  MemoryTracker tracker;
  const DrafterStepOptions options = drafter_step_options(config, 3, 5);
  for (std::uint64_t seed = 10; seed < 14; ++seed) {
    const DrafterBatch<double> batch = tiny_batch(tracker, 3, seed);
    DrafterBatch<double> shell = convert_batch<double>(tracker, batch);
    const Bf16Features f = round_features_to_bf16(tracker, shell);
    EXPECT_EQ(rank_sequences_weight_sum(config, {5, &shell, &f}, options), drafter_weight_sum(config, batch, options))
        << "seed " << seed;
  }

  DrafterBatch<double> shell = tiny_batch(tracker, 2, 20);
  Bf16Features f = round_features_to_bf16(tracker, shell);
  shell.tokens[1 * 12 + 3] = config.vocab_size;
  expect_input_error([&] { rank_sequences_weight_sum(config, {5, &shell, &f}, options); }, {"tokens[1][3]"});
  shell.tokens[1 * 12 + 3] = 0;
  f.target_features[(0 * 12 + 2) * config.feature_width() + 5] = Bf16Bits(0x7FC0);  // NaN
  expect_input_error(
      [&] {
        rank_sequences_weight_sum(config, {5, &shell, &f}, options);
      },
      {"target_features[0][2]", "element 5", "nan", "finite"});
  f.target_features[(0 * 12 + 2) * config.feature_width() + 5] = Bf16Bits(0);
  EXPECT_NO_THROW(rank_sequences_weight_sum(config, {5, &shell, &f}, options));
  f.teacher_hidden = Tensor<Bf16Bits>(tracker, MemoryCategory::inputs, {2, 11, config.hidden_size});
  expect_input_error(
      [&] {
        rank_sequences_weight_sum(config, {5, &shell, &f}, options);
      },
      {"teacher_hidden", "[2, 11"});
}

TEST(RankSequences, TheTurnWidensTheBf16ValuesExactly) {
  MemoryTracker tracker;
  const DrafterBatch<double> batch = tiny_batch(tracker, 2, 30);
  const DrafterBatch<double> want = rounded_in_double(tracker, batch);
  DrafterBatch<double> shell = convert_batch<double>(tracker, batch);
  const Bf16Features f = round_features_to_bf16(tracker, shell);
  const RankSequences s{0, &shell, &f};
  const std::size_t before = tracker.current_total();
  {
    const SequenceAtTurn turn(tracker, s);
    const DrafterBatch<double>& got = turn.batch();
    EXPECT_NE(&got, &shell);
    ASSERT_EQ(got.target_features.shape(), want.target_features.shape());
    ASSERT_EQ(got.teacher_hidden.shape(), want.teacher_hidden.shape());
    for (std::int64_t e = 0; e < want.target_features.numel(); ++e) {
      ASSERT_EQ(got.target_features[e], want.target_features[e]) << "F element " << e;
    }
    for (std::int64_t e = 0; e < want.teacher_hidden.numel(); ++e) {
      ASSERT_EQ(got.teacher_hidden[e], want.teacher_hidden[e]) << "G element " << e;
    }
    for (std::int64_t e = 0; e < want.tokens.numel(); ++e) ASSERT_EQ(got.tokens[e], want.tokens[e]);
    for (std::int64_t e = 0; e < want.loss_mask.numel(); ++e) ASSERT_EQ(got.loss_mask[e], want.loss_mask[e]);
  }
  EXPECT_EQ(tracker.current_total(), before);  // the widened copy lives as long as the turn
  const RankSequences whole{0, &batch};
  const SequenceAtTurn turn(tracker, whole);
  EXPECT_EQ(&turn.batch(), &batch);  // nothing to widen: the batch itself
}

// The reference step computes in double: handed bf16 features it computes on their values, bitwise
// as on a double batch holding those values. Two steps, two sequences of their own lengths.
TEST(RankSequences, AReferenceStepOnBf16FeaturesIsTheStepOnTheirValues) {
  SingleProcessCommunicator comm;
  const TrainingConfig training = tiny_training_config(2, 1, 1);
  TinyTrainer on_doubles(comm, training), on_bf16(comm, training);
  for (std::int64_t t = 0; t < 2; ++t) {
    MemoryTracker tracker;
    const std::vector<SequenceData> data = load_sequences(tracker, on_doubles.config, t, {0, 1}, all_labelled);
    std::vector<SequenceData> rounded;
    std::vector<DrafterBatch<double>> shells;
    std::vector<Bf16Features> features;
    shells.reserve(data.size());
    features.reserve(data.size());
    std::vector<RankSequences> held;
    for (const SequenceData& d : data) {
      rounded.push_back({d.g, rounded_in_double(tracker, d.batch)});
      shells.push_back(convert_batch<double>(tracker, d.batch));
      features.push_back(round_features_to_bf16(tracker, shells.back()));
      held.push_back({d.g, &shells.back(), &features.back()});
    }
    const StepMetrics a = train_step(on_doubles.tracker, comm, on_doubles.config, training, on_doubles.frozen,
                                     on_doubles.state, as_rank_sequences(rounded));
    const StepMetrics b =
        train_step(on_bf16.tracker, comm, on_bf16.config, training, on_bf16.frozen, on_bf16.state, held);
    EXPECT_EQ(a.loss, b.loss) << "step " << t;
    EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << t;
    EXPECT_EQ(a.weight_sum, b.weight_sum) << "step " << t;
    EXPECT_EQ(a.accuracy, b.accuracy) << "step " << t;
    EXPECT_GT(a.weight_sum, 0.0);
  }
  const Tensor<double>& x = on_doubles.state.optimizer.master;
  const Tensor<double>& y = on_bf16.state.optimizer.master;
  ASSERT_EQ(x.numel(), y.numel());
  for (std::int64_t e = 0; e < x.numel(); ++e) ASSERT_EQ(x[e], y[e]) << "master element " << e;
}

}  // namespace
}  // namespace dflash::testing
