// The training step on R = 1 ... 4 MPI ranks (one mpirun of 4 processes; sub-communicators of
// the first R ranks), against the single-process run of the same global batch (TRAINING §11, §13):
// every world size, micro-step count and ZeRO stage gives the same parameters, master weights,
// moments and metrics after three steps to 1e-12 (SPEC §10), with dropout on, clipping active,
// ranks whose sequences differ in length, a rank whose sequences all have weight 0, small buckets
// (many, the last one partial) and a flat size that no R x 128 divides. Faults: a non-finite
// gradient on one rank, mismatched configs. The plan against the measured peak per category. The
// committed training golden on two ranks.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/tolerances.hpp"
#include "distributed/run/plan_gate.hpp"
#include "distributed/single_process_communicator.hpp"
#include "golden/training.hpp"
#include "harness/mpi_world.hpp"
#include "planner/plan_vs_measured.hpp"
#include "planner/training_plan.hpp"
#include "tests/distributed/forwarding_communicator.hpp"
#include "tests/distributed/training_run.hpp"

namespace dflash::testing {
namespace {

constexpr std::int64_t kGlobal = 24;  // divisible by R U for R = 1..4, U = 1, 2
constexpr std::int64_t kSteps = 3;
constexpr std::int64_t kSmallBucket = 512;  // 64 doubles: many buckets, the last one partial

// Rank 1 of 4 with U = 2 (b = 3) processes g = 3, 4, 5, 15, 16, 17: all without labels.
bool unlabelled_rank(std::int64_t g) { return (g >= 3 && g <= 5) || (g >= 15 && g <= 17); }

TrainingRun single_rank_run(std::int64_t steps, const Unlabelled& unlabelled) {
  SingleProcessCommunicator single;
  return run_training(single, tiny_training_config(kGlobal, 1, 0), steps, kDefaultBucketBytes, unlabelled);
}

TEST(DistributedTraining, TheProblemExercisesWhatItClaims) {
  const TrainingRun reference = single_rank_run(kSteps, unlabelled_rank);
  bool clipped = false;
  for (const StepMetrics& m : reference.metrics) clipped |= m.clipped;
  EXPECT_TRUE(clipped) << "max_grad_norm must be below some step's gradient norm";
  const std::int64_t P = drafter_parameter_count(tiny_drafter_config());
  for (int R = 2; R <= 4; ++R) EXPECT_NE(P % (R * kZeroShardAlignment), 0) << "R = " << R;
  const GlobalBatchLayout layout(kGlobal, 4, 2);
  for (std::int64_t g : layout.sequences_of_rank(1)) EXPECT_TRUE(unlabelled_rank(g)) << g;
  EXPECT_GT(reference.metrics[0].weight_sum, 0);
}

// The in-place forms follow NCCL's conventions (communicator.hpp) to the byte: the collective
// writes the rank's block (reduce-scatter) or the other ranks' blocks (all-gather) and nothing
// else. MPI's own in-place reduce-scatter also leaves the sums at the start of the buffer; a caller
// that read block 0 for its own then passed on CPU ranks and failed under NCCL.
TEST(MpiCommunicator, InPlaceCollectivesWriteOnlyWhatNcclWrites) {
  const int R = world().size(), r = world().rank();
  const std::size_t count = 3;
  auto own_value = [](int rank, std::size_t e) { return double(100 * rank + int(e)); };
  std::vector<double> buffer(count * std::size_t(R));
  for (std::size_t e = 0; e < buffer.size(); ++e) buffer[e] = own_value(r, e);
  world().reduce_scatter(buffer.data(), buffer.data() + std::size_t(r) * count, count, CommType::f64, CommOp::sum);
  for (std::size_t e = 0; e < buffer.size(); ++e) {
    double want = own_value(r, e);
    if (e / count == std::size_t(r)) {
      want = 0;
      for (int q = 0; q < R; ++q) want += own_value(q, e);
    }
    EXPECT_EQ(buffer[e], want) << "reduce-scatter, element " << e << " on rank " << r;
  }
  for (std::size_t e = 0; e < buffer.size(); ++e) buffer[e] = e / count == std::size_t(r) ? own_value(r, e) : -1.0;
  world().all_gather(buffer.data() + std::size_t(r) * count, buffer.data(), count, CommType::f64);
  for (std::size_t e = 0; e < buffer.size(); ++e) {
    EXPECT_EQ(buffer[e], own_value(int(e / count), e)) << "all-gather, element " << e << " on rank " << r;
  }
}

// Every rank of this job runs on this machine (mpirun -np 4 here): the node's ranks are the world,
// and their node-local ranks 0 ... R-1, one each (the GPU a GPU rank takes).
TEST(MpiCommunicator, NodeRanksAreTheRanksSharingThisMachine) {
  MpiCommunicator& w = world();
  EXPECT_EQ(w.node_ranks(), w.size());
  std::vector<std::int64_t> local(std::size_t(w.size()), 0);
  local[std::size_t(w.rank())] = w.node_local_rank();
  w.all_reduce(local.data(), local.data(), local.size(), CommType::i64, CommOp::sum);
  std::sort(local.begin(), local.end());
  for (int r = 0; r < w.size(); ++r) EXPECT_EQ(local[std::size_t(r)], r);
}

// A collective under WaitLimitLifted waits for a peer as long as it takes; the limit is back after.
// With the limit in force the slow peer would end the whole job (fail_job), failing this binary.
TEST(MpiCommunicator, ALiftedWaitLimitWaitsForASlowPeerAndComesBack) {
  MpiCommunicator& w = world();
  const double saved = w.wait_limit_seconds();
  w.set_wait_limit_seconds(0.25);
  double x = 1;
  {
    const WaitLimitLifted no_limit(w);
    EXPECT_EQ(w.wait_limit_seconds(), 0.0);
    if (w.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    w.all_reduce(&x, &x, 1, CommType::f64, CommOp::sum);
  }
  EXPECT_EQ(x, double(w.size()));
  EXPECT_EQ(w.wait_limit_seconds(), 0.25);
  w.set_wait_limit_seconds(saved);
}

TEST(DistributedTraining, EveryWorldSizeMicroStepCountAndZeroStageEqualsOneRank) {
  const TrainingRun reference = single_rank_run(kSteps, unlabelled_rank);
  for (int R = 1; R <= world().size(); ++R) {
    for (std::int64_t U : {1, 2}) {
      for (int zero : {0, 1}) {
        const auto sub = MpiCommunicator::split(world().rank() < R ? 0 : 1);
        if (world().rank() >= R) continue;
        const TrainingRun run =
            run_training(*sub, tiny_training_config(kGlobal, U, zero), kSteps, kSmallBucket, unlabelled_rank);
        expect_same_run(reference, run, str("R = ", R, ", U = ", U, ", ZeRO-", zero, ", rank ", sub->rank()));
      }
    }
  }
}

TEST(DistributedTraining, DefaultBucketsGiveTheSameRunAsSmallOnes) {
  const TrainingRun small = run_training(world(), tiny_training_config(kGlobal, 1, 1), 2, kSmallBucket);
  const TrainingRun large = run_training(world(), tiny_training_config(kGlobal, 1, 1), 2, kDefaultBucketBytes);
  expect_same_run(small, large, "bucket sizes");
}

// The buckets summed during the backward (the default) and all after it, on every rank of the
// world, ZeRO-0 and ZeRO-1, small buckets: the same collectives on the same data, so the runs are
// bitwise the same (parameters, master weights, moments, every metric).
TEST(DistributedTraining, BucketsDuringTheBackwardEqualBucketsAfterItBitwise) {
  for (int zero : {0, 1}) {
    const TrainingConfig training = tiny_training_config(kGlobal, 2, zero);
    const TrainingRun during = run_training(world(), training, 2, kSmallBucket, all_labelled, true);
    const TrainingRun after = run_training(world(), training, 2, kSmallBucket, all_labelled, false);
    EXPECT_EQ(during.params, after.params) << "ZeRO-" << zero;
    EXPECT_EQ(during.master, after.master) << "ZeRO-" << zero;
    EXPECT_EQ(during.exp_avg, after.exp_avg) << "ZeRO-" << zero;
    EXPECT_EQ(during.exp_avg_sq, after.exp_avg_sq) << "ZeRO-" << zero;
    ASSERT_EQ(during.metrics.size(), after.metrics.size());
    for (std::size_t t = 0; t < during.metrics.size(); ++t) {
      const StepMetrics& a = during.metrics[t];
      const StepMetrics& b = after.metrics[t];
      EXPECT_EQ(a.loss, b.loss);
      EXPECT_EQ(a.ce, b.ce);
      EXPECT_EQ(a.kl, b.kl);
      EXPECT_EQ(a.accuracy, b.accuracy);
      EXPECT_EQ(a.grad_norm, b.grad_norm);
      EXPECT_EQ(a.clipped, b.clipped);
      EXPECT_EQ(a.tokens, b.tokens);
    }
  }
}

// Teacher rows of 1e308 (finite, so accepted as input) overflow the teacher logits W_lm G: the
// teacher distribution, the loss and every gradient of that rank become NaN.
TEST(DistributedTraining, NonFiniteGradientOnOneRankStopsEveryRankWithNothingApplied) {
  const TrainingConfig training = tiny_training_config(8, 1, 1);
  TinyTrainer tiny(world(), training);
  const DrafterConfig& config = tiny.config;
  TrainingState& state = tiny.state;
  const GlobalBatchLayout layout = GlobalBatchLayout::of(training, world().size());
  std::vector<SequenceData> data =
      load_sequences(tiny.tracker, config, 0, layout.sequences_of_rank(world().rank()), all_labelled);
  if (world().rank() == 1) {
    Tensor<double>& G = data.front().batch.teacher_hidden;
    std::fill(G.data(), G.data() + G.numel(), 1e308);
  }
  const FlatLayout flat(config, world().size(), training.zero_stage);
  std::vector<double> before(static_cast<std::size_t>(flat.count()));
  read_flat(flat, state.params, 0, before);
  const std::vector<double> master = state.optimizer.master.values(), m = state.optimizer.exp_avg.values();
  try {
    train_step(tiny.tracker, world(), config, training, tiny.frozen, state, as_rank_sequences(data),
               {.last_good_checkpoint = "run/step-00000041"});
    ADD_FAILURE() << "the step was applied";
  } catch (const NonFiniteStepError& e) {
    EXPECT_EQ(e.step(), 0);
    EXPECT_EQ(e.rank(), 1);
    EXPECT_EQ(e.tensor(), "fc.weight");
    const std::string what = e.what();
    for (const char* part : {"at step 0", "on rank 1", "fc.weight", "not applied on any rank", "run/step-00000041"}) {
      EXPECT_NE(what.find(part), std::string::npos) << part << " not in: " << what;
    }
  }
  std::vector<double> after(before.size());
  read_flat(flat, state.params, 0, after);
  EXPECT_EQ(after, before);
  EXPECT_EQ(state.optimizer.master.values(), master);
  EXPECT_EQ(state.optimizer.exp_avg.values(), m);
  EXPECT_EQ(state.optimizer.step, 0);
}

TEST(DistributedTraining, MismatchedConfigsAreRefusedOnEveryRank) {
  TrainingConfig training = tiny_training_config(kGlobal, 1, 1);
  if (world().rank() == 2) training.learning_rate *= 2;
  try {
    require_same_config(world(), tiny_drafter_config(), training);
    ADD_FAILURE() << "a config that differs on rank 2 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 2 of 4"), std::string::npos) << e.what();
  }
  DrafterConfig config = tiny_drafter_config();
  if (world().rank() == 3) config.hidden_dropout = 0.3;
  EXPECT_THROW(require_same_config(world(), config, tiny_training_config(kGlobal, 1, 1)), InputError);
  EXPECT_NO_THROW(require_same_config(world(), tiny_drafter_config(), tiny_training_config(kGlobal, 1, 1)));
}

TEST(DistributedTraining, SequencesThatAreNotTheRanksShareAreRefused) {
  const TrainingConfig training = tiny_training_config(8, 1, 0);
  TinyTrainer tiny(world(), training);
  const std::vector<SequenceData> data =
      load_sequences(tiny.tracker, tiny.config, 0, {0, 1}, all_labelled);  // rank 0's share
  if (world().rank() == 0) return;  // the others pass rank 0's: refused before any collective
  EXPECT_THROW(
      train_step(tiny.tracker, world(), tiny.config, training, tiny.frozen, tiny.state, as_rank_sequences(data)),
      InputError);
}

// The tracker's peak per category against `dflash plan`'s numbers for the same step (SPEC §8):
// equal in every category (sampled anchor slots are tracked inputs too).
void expect_plan_equals_measured(int R, std::int64_t U, int zero) {
  const auto sub = MpiCommunicator::split(world().rank() < R ? 0 : 1);
  if (world().rank() >= R) return;
  const TrainingConfig training = tiny_training_config(R * U * 2, U, zero);
  const std::int64_t S = training.max_context, b = 2;
  TinyTrainer tiny(*sub, training);
  const DrafterConfig& config = tiny.config;
  MemoryTracker& tracker = tiny.tracker;
  const GlobalBatchLayout layout = GlobalBatchLayout::of(training, R);
  for (std::int64_t t = 0; t < 2; ++t) {
    std::vector<DrafterBatch<double>> batches;  // one batch of b equal-length sequences per micro-step
    std::vector<RankSequences> mine;
    const std::vector<std::int64_t> gs = layout.sequences_of_rank(sub->rank());
    for (std::int64_t u = 0; u < U; ++u) {
      batches.push_back(make_drafter_batch<double>(
          tracker, config, {.sequences = b, .context_length = S, .seed = std::uint64_t(50 + 10 * t + gs[u * b])}));
    }
    for (std::int64_t u = 0; u < U; ++u) mine.push_back({gs[u * b], &batches[u]});
    train_step(tracker, *sub, config, training, tiny.frozen, tiny.state, mine, {.bucket_bytes = kSmallBucket});
  }
  // The request `dflash train --backend cpu` plans with (its plan gate), at this step's buckets.
  PlanRequest q = training_plan_request(config, training, R, TrainingBackend::cpu, single_rank_hosts());
  ASSERT_EQ(q.sequences, b);
  q.layout.bucket_bytes = kSmallBucket;
  q.layout.buckets_in_flight = 1;
  const MemoryPlan plan = plan_training_memory(q);
  const std::vector<CategoryComparison> rows = compare_plan_with_tracker(plan.categories, tracker);
  const std::string context = str("R = ", R, ", U = ", U, ", ZeRO-", zero, "\n", comparison_report(rows));
  for (const CategoryComparison& c : rows) {
    EXPECT_EQ(c.planned, c.measured) << category_name(c.category) << ": " << context;
  }
  EXPECT_GT(tracker.peak(MemoryCategory::optimizer), 0u);
  EXPECT_EQ(tracker.peak(MemoryCategory::communication) > 0, R > 1) << context;
}

TEST(DistributedTraining, PlanEqualsMeasuredPeakPerCategory) {
  expect_plan_equals_measured(1, 1, 0);
  expect_plan_equals_measured(2, 2, 1);
  expect_plan_equals_measured(3, 1, 0);
  expect_plan_equals_measured(4, 1, 1);
}

}  // namespace
}  // namespace dflash::testing

namespace dflash::testing {
namespace {

// The committed training golden (one process) recomputed on 2 ranks, each with its share of every
// step's global batch: final parameters and moments within 1e-12 of the golden's (SPEC §10).
TEST(DistributedTraining, TwoRanksReproduceTheTrainingGolden) {
  const TrainingGolden g = read_training_golden(default_training_golden_dir() / "tiny-3-steps.safetensors");
  constexpr int R = 2;
  const auto sub = MpiCommunicator::split(world().rank() < R ? 0 : 1);
  if (world().rank() >= R) return;
  MemoryTracker tracker;
  TrainingState state =
      make_training_state(tracker, g.config, g.training, *sub, convert_parameters<double>(tracker, g.initial));
  const FlatLayout flat(g.config, R, g.training.zero_stage);
  const GlobalBatchLayout layout = GlobalBatchLayout::of(g.training, R);
  for (std::int64_t t = 0; t < g.steps; ++t) {
    const DrafterBatch<double>& all = g.batches[static_cast<std::size_t>(t)];
    std::vector<DrafterBatch<double>> mine;  // one batch per global index of this rank (rows of the stored batch)
    std::vector<RankSequences> seqs;
    const std::vector<std::int64_t> gs = layout.sequences_of_rank(sub->rank());
    mine.reserve(gs.size());
    for (std::int64_t gi : gs) {
      const std::int64_t S = all.context_length(), KH = g.config.feature_width(), H = g.config.hidden_size;
      DrafterBatch<double> b{Tensor<std::int64_t>(tracker, MemoryCategory::inputs, {1, S}),
                             Tensor<std::uint8_t>(tracker, MemoryCategory::inputs, {1, S}),
                             Tensor<double>(tracker, MemoryCategory::inputs, {1, S, KH}),
                             Tensor<double>(tracker, MemoryCategory::inputs, {1, S, H}),
                             std::nullopt,
                             std::nullopt};
      std::copy_n(all.tokens.row(gi), S, b.tokens.data());
      std::copy_n(all.loss_mask.row(gi), S, b.loss_mask.data());
      std::copy_n(all.target_features.row(gi), S * KH, b.target_features.data());
      std::copy_n(all.teacher_hidden.row(gi), S * H, b.teacher_hidden.data());
      mine.push_back(std::move(b));
      seqs.push_back({gi, &mine.back()});
    }
    train_step(tracker, *sub, g.config, g.training, g.frozen, state, seqs);
  }
  const std::vector<double> m = gather_full(*sub, flat, state.optimizer.exp_avg);
  const std::vector<double> v = gather_full(*sub, flat, state.optimizer.exp_avg_sq);
  std::vector<double> params(static_cast<std::size_t>(flat.count()));
  read_flat(flat, state.params, 0, params);
  for (const FlatTensor& t : flat.tensors()) {
    const auto at = static_cast<std::size_t>(t.offset), n = static_cast<std::size_t>(t.numel);
    const std::pair<const char*, const std::vector<double>*> got[] = {
        {"final/param/", &params}, {"final/exp_avg/", &m}, {"final/exp_avg_sq/", &v}};
    for (const auto& [prefix, values] : got) {
      const GoldenTensor& want = g.results.at(prefix + t.name);
      EXPECT_LE(relative_error(std::span<const double>(*values).subspan(at, n), std::span<const double>(want.values)),
                kReferenceTolerance)
          << prefix << t.name;
    }
  }
}

}  // namespace
}  // namespace dflash::testing

namespace dflash::testing {
namespace {

// One step's events on this rank in the order they happened: a collective (its name and count) or
// the first backward dropout draw of (global sequence, layer), which marks that layer's backward.
struct StepEvent {
  std::string what;  // "all_reduce", "reduce_scatter", "all_gather", "broadcast" or "backward"
  std::int64_t count = 0;
  std::uint32_t sequence = 0, layer = 0;
};

// Passes every collective on to `inner` and records it.
class RecordingCommunicator final : public ForwardingCommunicator {
 public:
  RecordingCommunicator(Communicator& inner, std::vector<StepEvent>& events)
      : ForwardingCommunicator(inner), events_(events) {}
  void all_reduce(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override {
    record("all_reduce", count);
    ForwardingCommunicator::all_reduce(send, recv, count, type, op);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override {
    record("reduce_scatter", count);
    ForwardingCommunicator::reduce_scatter(send, recv, count, type, op);
  }
  void all_gather(const void* send, void* recv, std::size_t count, CommType type) override {
    record("all_gather", count);
    ForwardingCommunicator::all_gather(send, recv, count, type);
  }
  void broadcast(void* buffer, std::size_t count, CommType type, int root) override {
    record("broadcast", count);
    ForwardingCommunicator::broadcast(buffer, count, type, root);
  }

 private:
  void record(const char* what, std::size_t count) { events_.push_back({what, std::int64_t(count)}); }
  std::vector<StepEvent>& events_;
};

// Two ranks, two sequences each (U = 2), dropout on: the gradient buckets are summed while the last
// sequence's backward runs. The buckets that layer 1 and norm.weight complete (the end of the flat
// vector) go, last bucket first, after layer 1's backward and before layer 0's; the rest after
// layer 0's. No gradient sum starts before the last sequence's backward has reached layer 1.
void expect_buckets_issued_during_backward(int zero) {
  constexpr int R = 2;
  const auto sub = MpiCommunicator::split(world().rank() < R ? 0 : 1);
  if (world().rank() >= R) return;
  const TrainingConfig training = tiny_training_config(4, 2, zero);
  TinyTrainer tiny(*sub, training);
  const DrafterConfig& config = tiny.config;
  const GlobalBatchLayout layout = GlobalBatchLayout::of(training, R);
  const std::vector<SequenceData> data =
      load_sequences(tiny.tracker, config, 0, layout.sequences_of_rank(sub->rank()), all_labelled);
  std::vector<StepEvent> events;
  RecordingCommunicator recording(*sub, events);
  const DropoutObserver backward_marks = [&](const DropoutDraw& d) {
    if (d.pass != DropoutPass::backward) return;
    for (const StepEvent& e : events) {
      if (e.what == "backward" && e.sequence == d.sequence && e.layer == d.layer) return;
    }
    events.push_back({"backward", 0, d.sequence, d.layer});
  };
  train_step(tiny.tracker, recording, config, training, tiny.frozen, tiny.state, as_rank_sequences(data),
             {.bucket_bytes = kSmallBucket, .dropout_observer = &backward_marks});

  const auto last = static_cast<std::uint32_t>(data.back().g);
  auto backward_of = [&](std::uint32_t sequence, std::uint32_t layer) {
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (events[i].what == "backward" && events[i].sequence == sequence && events[i].layer == layer) return i;
    }
    ADD_FAILURE() << "no backward of sequence " << sequence << " layer " << layer;
    return events.size();
  };
  const std::size_t layer1 = backward_of(last, 1), layer0 = backward_of(last, 0);
  ASSERT_LT(layer1, layer0);

  const FlatLayout flat(config, R, zero);
  const GradientBuckets buckets = gradient_buckets(flat.count(), flat.parallel_layout(kSmallBucket, 1), sizeof(double));
  const std::int64_t layer1_offset = flat.tensors().at(first_layer_parameter(1)).offset;
  const std::string sum = zero == 0 ? "all_reduce" : "reduce_scatter";
  std::vector<std::int64_t> before_layer0, want_before_layer0, after_layer0, want_after_layer0;
  for (std::int64_t k = buckets.count() - 1; k >= 0; --k) {
    (buckets.first(k) >= layer1_offset ? want_before_layer0 : want_after_layer0).push_back(buckets.elements(k));
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    // The scalar sums (W, the loss sums, the counts, the norm) are at most 3 values; every bucket holds more.
    const bool gradient_sum = events[i].what == sum && events[i].count > 3;
    if (!gradient_sum) continue;
    EXPECT_GT(i, layer1) << "a bucket was summed before the last sequence's backward reached it";
    (i < layer0 ? before_layer0 : after_layer0).push_back(events[i].count);
  }
  const std::string context = str("ZeRO-", zero, ", rank ", sub->rank());
  ASSERT_FALSE(want_before_layer0.empty()) << context << ": the problem must have buckets inside layer 1";
  EXPECT_EQ(before_layer0, want_before_layer0) << context << ": buckets summed before layer 0's backward";
  EXPECT_EQ(after_layer0, want_after_layer0) << context << ": buckets summed after it";
}

TEST(DistributedTraining, EachBucketIsSummedAsSoonAsBackwardHasFinishedIt) {
  expect_buckets_issued_during_backward(0);
  expect_buckets_issued_during_backward(1);
}

}  // namespace
}  // namespace dflash::testing
