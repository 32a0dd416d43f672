// The host plan (planner/host_memory.hpp) against the code it plans, term by term: each term is the
// bytes of the allocation `dflash train --backend cuda` makes, counted by a MemoryTracker where the
// code counts it, and from the vectors' own sizes where it does not. configs/tiny-train.json on the
// synthetic set, 3 ranks and 1 under ZeRO-1 (shards with padding) and 1 under ZeRO-0. (checkpoint_gather,
// the two moments the writing rank holds at once, is shown by test_save_restore's
// WrittenFromValuesAsksEachPartOnceInOrderAndWritesTheSameBytes: master is written before them.)
#include <gtest/gtest.h>

#include <csignal>

#include "cuda/drafter/step_loop.hpp"
#include "distributed/data/feature_dataset.hpp"
#include "distributed/device_training_layout.hpp"
#include "distributed/flat_parameters.hpp"
#include "distributed/optimizer_state.hpp"
#include "distributed/run/plan_gate.hpp"
#include "distributed/weights/drafter_init.hpp"
#include "harness/cuda/host_backend.hpp"
#include "planner/host_memory.hpp"
#include "reference/storage_pool.hpp"
#include "tests/distributed/run/cuda_run_support.hpp"

namespace dflash::train_testing {
namespace {

HostMemoryPlan host_plan(const DrafterConfig& config, const TrainingConfig& training, int ranks) {
  return *plan_host_memory(training_plan_request(config, training, ranks, TrainingBackend::cuda, single_rank_hosts()));
}

std::int64_t bytes_of(const auto& v) { return std::int64_t(v.size() * sizeof(v[0])); }

// The start: every rank's part in double as make_optimizer_state makes it, and rank 0's fp32 copy.
TEST(HostMemoryPlan, TheStartsTermsAreTheOptimizerPartsBytes) {
  const DrafterConfig config = tiny_config();
  TrainingConfig training = load_training_config(tiny_train_config_path());
  // One rank under ZeRO-1: its shard is the whole padded vector, held in double, uploaded to P.
  for (const auto& [ranks, zero] : {std::pair{3, 1}, std::pair{1, 1}, std::pair{1, 0}}) {
    training.zero_stage = zero;
    const HostMemoryPlan h = host_plan(config, training, ranks);
    const FlatLayout layout(config, ranks, zero);
    if (zero == 1) {
      ASSERT_GT(layout.padded(), layout.count()) << "the shards must hold padding here";
    }
    for (int rank = 0; rank < ranks; ++rank) {
      MemoryTracker tracker;
      const OptimizerState state = make_optimizer_state(tracker, layout, rank, [&](std::int64_t first, auto out) {
        seeded_flat_values(config, config.seed, first, out);
      });
      EXPECT_EQ(std::int64_t(tracker.current_total()), h.optimizer_part) << "rank " << rank << " of " << ranks;
      const DeviceOptimizerPart part = device_optimizer_part(layout, rank, state);
      const std::int64_t upload = bytes_of(part.master) + bytes_of(part.exp_avg) + bytes_of(part.exp_avg_sq);
      // Rank 0's part is the largest (the last one's may end in the padding): the plan's.
      if (rank == 0) {
        EXPECT_EQ(upload, h.part_upload);
      }
      EXPECT_LE(upload, h.part_upload);
      const FlatRange owned = owned_range(layout, rank);
      EXPECT_LE(3 * owned.size() * std::int64_t(sizeof(double)), h.checkpoint_slice);
    }
    EXPECT_EQ(h.frozen_piece, config.vocab_size * config.hidden_size * (8 + 2));  // V H < 2^20: one piece
  }
}

// The steps: a sequence of max_context rows as the run reads it for a CUDA step (counted by the
// tracker, as the trainer's is), tokens and mask with F and G in bf16, every sequence of the rank's
// step at once; the staging of its uploads from those bits (counted by the step's host tracker); and
// the tables prepared for it, from their vectors' sizes.
TEST(HostMemoryPlan, TheStepsTermsAreTheSequencesBytes) {
  const DrafterConfig config = tiny_config();
  const TrainingConfig training = load_training_config(tiny_train_config_path());
  const int ranks = 3;
  const HostMemoryPlan h = host_plan(config, training, ranks);
  const std::int64_t rank_sequences = training.global_batch_sequences / ranks;  // U = 1
  const FeatureDataset dataset =
      FeatureDataset::open(synthetic_run_data() / "features", FeatureSetShape::of(config), ShardValueCheck{});

  std::int64_t longest = -1;  // a sequence the run truncates to max_context: the plan's S
  for (std::int64_t i = 0; i < dataset.num_sequences() && longest < 0; ++i) {
    MemoryTracker probe;
    if (dataset.sequence_bf16_batch(probe, i, training.max_context).truncated) longest = i;
  }
  ASSERT_GE(longest, 0) << "the synthetic set must hold a sequence longer than max_context";
  MemoryTracker tracker;
  const FeatureDataset::Bf16Batch q = dataset.sequence_bf16_batch(tracker, longest, training.max_context);
  EXPECT_EQ(q.batch.context_length(), training.max_context);
  EXPECT_EQ(std::int64_t(tracker.current_total()) * rank_sequences, h.step_batch);
  EXPECT_EQ(tracker.peak_total(), tracker.current_total());  // no double of F or G on the way

  const DrafterStepOptions options = drafter_step_options(config, 0, 0);
  const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, q.batch, options);
  ASSERT_EQ(seqs.size(), 1u);
  const PreparedSequence<double>& s = seqs[0];
  const SequenceBlocks<double>& b = s.blocks;
  const std::int64_t tables = bytes_of(s.slots.anchors) + bytes_of(s.slots.keep) + bytes_of(b.input_tokens) +
                              bytes_of(b.positions) + bytes_of(b.labels) + bytes_of(b.weights) + bytes_of(b.valid) +
                              bytes_of(b.teacher_rows);
  const std::int64_t hits =
      bytes_of(s.slots.keep) + bytes_of(b.valid) + std::int64_t(b.valid.size());  // keep, valid, a hit a row
  EXPECT_EQ(tables + rank_sequences * hits, h.sequence_tables);

  // The upload of that sequence as the step makes it: F goes up from q.features, not through the
  // staging, which holds the gathered teacher rows alone.
  MemoryTracker host, device;
  {
    UploadStaging staging(host);
    const SequenceUpload<HostMemory> up(HostMemory{device}, staging, q.batch, 0, s, false, &q.features);
    EXPECT_EQ(std::int64_t(host.current(MemoryCategory::inputs)), h.upload_staging);
  }
}

// The writing rank's save holds no block the storage pool kept from the step's batches: the plan's
// checkpoint_write (staging and gather) leaves them out, and the run lets go of them before it
// gathers. Between steps the pool does keep them (the steps' memory, reused by the next step).
TEST(HostMemoryPlan, TheWritingRankReleasesTheStepsCachedBatchesBeforeItGathers) {
  class GatherProbe final : public DeviceStepBackend<HostTrainingBackend> {
   public:
    GatherProbe(std::vector<std::size_t>& log, HostTrainingBackend backend, CudaCommunicators comms,
                const DrafterConfig& config, const TrainingConfig& training, const FrozenWeightSource& frozen,
                const OptimizerState& state)
        : DeviceStepBackend(backend, comms, config, training, frozen, state), log_(log) {}
    FlatValues gather_optimizer(OptimizerPart part, bool to_this_rank) override {
      if (part == OptimizerPart::master) log_.push_back(storage_pool_state().cached_bytes);
      return DeviceStepBackend::gather_optimizer(part, to_this_rank);
    }

   private:
    std::vector<std::size_t>& log_;
  };
  ScratchDirectory dir;
  MemoryTracker memory;
  TrainingRunOptions o = cuda_options_for(dir / "run", memory);
  o.save_every = 1;
  std::vector<std::size_t> cached_at_gather, cached_after_step;
  o.make_step_backend = [&](Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                            const FrozenWeightSource& frozen, TrainingState state) {
    return std::make_unique<GatherProbe>(cached_at_gather, HostTrainingBackend{memory}, CudaCommunicators{comm, comm},
                                         config, training, frozen, state.optimizer);
  };
  o.after_step = [&](std::int64_t t) {
    cached_after_step.push_back(storage_pool_state().cached_bytes);
    if (t == 1) std::raise(SIGTERM);
  };
  ASSERT_EQ(train(o), 0);
  ASSERT_EQ(cached_after_step.size(), 2u);
  ASSERT_EQ(cached_at_gather.size(), 2u);  // a save after each step
  for (std::size_t t = 0; t < 2; ++t) {
    EXPECT_GT(cached_after_step[t], 0u) << "step " << t << ": the pool keeps the step's batches";
    EXPECT_EQ(cached_at_gather[t], 0u) << "the save after step " << t;
  }
}

// The plan's step_batch holds a CUDA rank's sequences in bf16: the run hands its step every sequence
// with F and G in bf16 and the batch's own empty (the backend reads them so), and evaluation too.
TEST(HostMemoryPlan, ACudaRunHandsItsStepAndItsEvaluationTheSequencesInBf16) {
  struct Seen {
    std::int64_t sequences = 0, in_bf16 = 0, evaluated = 0, evaluated_in_bf16 = 0;
  };
  class FeatureProbe final : public DeviceStepBackend<HostTrainingBackend> {
   public:
    FeatureProbe(Seen& seen, HostTrainingBackend backend, CudaCommunicators comms, const DrafterConfig& config,
                 const TrainingConfig& training, const FrozenWeightSource& frozen, const OptimizerState& state)
        : DeviceStepBackend(backend, comms, config, training, frozen, state), seen_(seen) {}
    StepMetrics step(std::span<const RankSequences> sequences, const TrainStepOptions& options) override {
      for (const RankSequences& s : sequences) {
        ++seen_.sequences;
        if (s.bf16_features != nullptr && s.batch->target_features.numel() == 0) ++seen_.in_bf16;
      }
      return DeviceStepBackend::step(sequences, options);
    }
    SequenceEvaluation forward_statistics(const DrafterConfig& config, const DrafterBatch<double>& batch,
                                          const DrafterStepOptions& options, const Bf16Features* bf16) override {
      ++seen_.evaluated;
      if (bf16 != nullptr && batch.target_features.numel() == 0) ++seen_.evaluated_in_bf16;
      return DeviceStepBackend::forward_statistics(config, batch, options, bf16);
    }

   private:
    Seen& seen_;
  };
  ScratchDirectory dir;
  MemoryTracker memory;
  TrainingRunOptions o = cuda_options_for(dir / "run", memory);
  o.eval_data = synthetic_run_data() / "features";
  o.eval_every = 1;
  Seen seen;
  o.make_step_backend = [&](Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                            const FrozenWeightSource& frozen, TrainingState state) {
    return std::make_unique<FeatureProbe>(seen, HostTrainingBackend{memory}, CudaCommunicators{comm, comm}, config,
                                          training, frozen, state.optimizer);
  };
  o.after_step = [&](std::int64_t t) {
    if (t == 0) std::raise(SIGTERM);
  };
  ASSERT_EQ(train(o), 0);
  EXPECT_GT(seen.sequences, 0);
  EXPECT_EQ(seen.in_bf16, seen.sequences);
  EXPECT_GT(seen.evaluated, 0);
  EXPECT_EQ(seen.evaluated_in_bf16, seen.evaluated);
}

}  // namespace
}  // namespace dflash::train_testing
