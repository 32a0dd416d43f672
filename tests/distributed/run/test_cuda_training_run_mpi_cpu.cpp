// `dflash train --backend cuda` on 2 ranks in process under mpirun (MPI for the host scalars and
// the flat vectors alike), with the CUDA step's code on the CPU's training backend
// (cuda_run_support.hpp): ZeRO-1 shards, checkpoints gathered from every rank's shard, a SIGTERM
// seen by every rank, and a resume on another number of ranks, before a GPU run does any of it.
// Against the same run on one rank (rank 0, the single-process communicator):
//   - every step's tokens, truncated sequences and lr exactly (the data order and the schedule);
//   - the first step's loss within kReferenceTolerance (each sequence's loss is the same on any
//     rank; only the order of the double sum over ranks changes), later steps finite: the fp32
//     gradient is summed in another order on 2 ranks, so the runs part by rounding;
//   - the checkpoint of 2 ranks (written on 2 ranks, fp32 values) resumes on one and the run ends
//     at step 20 with one rank's data and schedule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <csignal>
#include <sstream>
#include <variant>

#include "common/tolerances.hpp"
#include "distributed/flat_parameters.hpp"
#include "distributed/metrics/svg_report.hpp"
#include "distributed/run/plan_gate.hpp"
#include "distributed/training_config.hpp"
#include "distributed/weights/drafter_export.hpp"
#include "distributed/weights/drafter_init.hpp"
#include "distributed/weights/target_tensors.hpp"
#include "harness/mpi_world.hpp"
#include "planner/memory_size.hpp"
#include "tests/distributed/run/cuda_run_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using dflash::testing::world;
using ::testing::HasSubstr;

// A directory every rank of the job sees: rank 0 makes it under the system temp directory and
// removes it at exit; the others learn its name from rank 0's pid.
class SharedDirectory {
 public:
  SharedDirectory() {
    std::int64_t pid = world().rank() == 0 ? std::int64_t(::getpid()) : 0;
    world().broadcast(&pid, 1, CommType::i64, 0);
    path_ = std::filesystem::temp_directory_path() / ("dflash-cuda-run-" + std::to_string(pid));
    if (world().rank() == 0) std::filesystem::create_directories(path_);
    std::int64_t made = 0;
    world().all_reduce(&made, &made, 1, CommType::i64, CommOp::sum);  // made before anyone uses it
  }
  ~SharedDirectory() {
    std::error_code ec;
    if (world_rank_ == 0) std::filesystem::remove_all(path_, ec);
  }
  SharedDirectory(const SharedDirectory&) = delete;
  SharedDirectory& operator=(const SharedDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  int world_rank_ = world().rank();
  std::filesystem::path path_;
};

const std::filesystem::path& shared_directory() {
  static const SharedDirectory dir;
  return dir.path();
}

int train_on_the_world(const TrainingRunOptions& o, std::string* log = nullptr) {
  std::ostringstream out;
  const int code = run_training(o, world(), out);
  if (log) *log = out.str();
  return code;
}

// The one-rank CUDA run (rank 0 only), made once.
const std::filesystem::path& one_rank_run() {
  static const ScratchDirectory dir;
  static MemoryTracker memory;
  static const std::filesystem::path out = [] {
    EXPECT_EQ(train(cuda_options_for(dir / "run", memory)), 0);
    return dir / "run";
  }();
  return out;
}

void expect_data_and_schedule_of_one_rank(const std::filesystem::path& run) {
  const std::vector<StepRecord> many = read_metrics_file(run / "metrics.jsonl"),
                                one = read_metrics_file(one_rank_run() / "metrics.jsonl");
  ASSERT_EQ(many.size(), 20u);
  ASSERT_EQ(one.size(), 20u);
  for (std::size_t t = 0; t < many.size(); ++t) {
    EXPECT_EQ(many[t].tokens, one[t].tokens) << "step " << t;
    EXPECT_EQ(many[t].truncated_sequences, one[t].truncated_sequences) << "step " << t;
    EXPECT_EQ(many[t].lr, one[t].lr) << "step " << t;
    EXPECT_TRUE(std::isfinite(many[t].loss)) << "step " << t;
  }
  // Block statistics are summed over the ranks: at step 0 both runs compute every sequence's forward
  // with the same initial weights, so the counts, and what is made of them, are the same exactly (a
  // run reporting rank 0's blocks alone would have half of them).
  EXPECT_EQ(many[0].accuracy_by_position, one[0].accuracy_by_position);
  EXPECT_EQ(many[0].acceptance_length, one[0].acceptance_length);
  EXPECT_EQ(many[0].accuracy, one[0].accuracy);
}

// The uninterrupted 2-rank CUDA run (every rank calls it), made once; `log` its log on this rank.
const std::filesystem::path& two_rank_run(std::string* log = nullptr) {
  static MemoryTracker memory;
  static std::string run_log;
  static const std::filesystem::path out = [] {
    const std::filesystem::path run = shared_directory() / "two";
    EXPECT_EQ(train_on_the_world(cuda_options_for(run, memory), &run_log), 0);
    return run;
  }();
  if (log) *log = run_log;
  return out;
}

TEST(CudaTrainingRunOnCpuRanks, TwoRanksFollowOneRank) {
  ASSERT_EQ(world().size(), 2) << "run under mpirun -np 2";
  std::string log;
  const std::filesystem::path run = two_rank_run(&log);
  if (world().rank() != 0) return;
  // The host plan counts the ranks that share this machine (MPI's shared-memory split, under any
  // launcher, not an mpirun variable) and holds the lead's peak against half the host.
  EXPECT_THAT(log, HasSubstr("node: 2 rank(s) at their peaks"));
  EXPECT_THAT(log, HasSubstr("host share per rank " + gib_string(host_memory_bytes_per_rank(2)) + " GiB"));
  expect_data_and_schedule_of_one_rank(run);
  const StepRecord first = read_metrics_file(run / "metrics.jsonl").front(),
                   alone = read_metrics_file(one_rank_run() / "metrics.jsonl").front();
  EXPECT_NEAR(first.loss, alone.loss, kReferenceTolerance * std::abs(alone.loss));
  const RunCheckpoint ck = read_run_checkpoint(run / "step-00000020", tiny_config());
  EXPECT_EQ(ck.world_size, 2);
  EXPECT_EQ(ck.data_cursor, read_run_checkpoint(one_rank_run() / "step-00000020", tiny_config()).data_cursor);
}

TEST(CudaTrainingRunOnCpuRanks, ASigtermOnTwoRanksSavesAndTheRunResumesOnOne) {
  const std::filesystem::path run = shared_directory() / "stopped";
  MemoryTracker memory;
  TrainingRunOptions o = cuda_options_for(run, memory);
  o.after_step = [](std::int64_t t) {
    if (t == 6) std::raise(SIGTERM);  // on every rank: each finishes the step, then they save
  };
  std::string log;
  ASSERT_EQ(train_on_the_world(o, &log), 0);
  if (world().rank() != 0) return;
  EXPECT_THAT(log, HasSubstr("stopped by signal"));
  EXPECT_EQ(latest_checkpoint(run), run / "step-00000007");
  EXPECT_EQ(read_run_checkpoint(run / "step-00000007", tiny_config()).world_size, 2);
  TrainingRunOptions alone = cuda_options_for(run, memory);
  alone.resume = true;
  ASSERT_EQ(train(alone, &log), 0);
  EXPECT_THAT(log, HasSubstr("written on 2 rank(s)"));
  expect_data_and_schedule_of_one_rank(run);
}

// Stopped and resumed on the same 2 ranks, each reading only its own ZeRO-1 part of the checkpoint
// (FlatSlice): the run ends bitwise the uninterrupted one, files and losses.
TEST(CudaTrainingRunOnCpuRanks, ASigtermOnTwoRanksThenAResumeOnTwoIsBitwiseTheUninterruptedRun) {
  const std::filesystem::path run = shared_directory() / "stopped-resumed-on-two";
  MemoryTracker memory;
  TrainingRunOptions o = cuda_options_for(run, memory);
  o.after_step = [](std::int64_t t) {
    if (t == 6) std::raise(SIGTERM);
  };
  ASSERT_EQ(train_on_the_world(o), 0);
  o.after_step = nullptr;
  o.resume = true;
  std::string log;
  ASSERT_EQ(train_on_the_world(o, &log), 0);
  const std::filesystem::path& whole = two_rank_run();
  if (world().rank() != 0) return;
  EXPECT_THAT(log, HasSubstr("resuming from"));
  for (const char* file : {kModelFileName, kOptimizerFileName, kTrainerStateFileName}) {
    EXPECT_EQ(file_text(run / "step-00000020" / file), file_text(whole / "step-00000020" / file)) << file;
  }
  const std::vector<StepRecord> a = read_metrics_file(run / "metrics.jsonl"),
                                b = read_metrics_file(whole / "metrics.jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t t = 0; t < a.size(); ++t) EXPECT_EQ(a[t].loss, b[t].loss) << t;
}

// What one gather_optimizer call asked for.
struct GatherAsked {
  OptimizerPart part;
  bool to_this_rank;
  bool operator==(const GatherAsked&) const = default;
};

// The run asks for the gathered optimizer on the rank that writes checkpoints alone (rank 0): a
// backend that records what each save asks for, around the CUDA run's own.
class GatherRecordingBackend final : public StepBackend {
 public:
  GatherRecordingBackend(std::unique_ptr<StepBackend> inner, std::vector<GatherAsked>& asked)
      : inner_(std::move(inner)), asked_(asked) {}
  std::int64_t completed_steps() const override { return inner_->completed_steps(); }
  SequenceEvaluation forward_statistics(const DrafterConfig& config, const DrafterBatch<double>& batch,
                                        const DrafterStepOptions& options,
                                        const Bf16Features* bf16 = nullptr) override {
    return inner_->forward_statistics(config, batch, options, bf16);
  }
  bool reads_features_as_bf16() const override { return inner_->reads_features_as_bf16(); }
  StepMetrics step(std::span<const RankSequences> sequences, const TrainStepOptions& options) override {
    return inner_->step(sequences, options);
  }
  FlatValues gather_optimizer(OptimizerPart part, bool to_this_rank) override {
    asked_.push_back({part, to_this_rank});
    return inner_->gather_optimizer(part, to_this_rank);
  }
  safetensors::Dtype master_dtype() const override { return inner_->master_dtype(); }
  std::map<std::string, std::int64_t> peak_bytes() const override { return inner_->peak_bytes(); }
  void reset_peaks() override { inner_->reset_peaks(); }

 private:
  std::unique_ptr<StepBackend> inner_;
  std::vector<GatherAsked>& asked_;
};

// A fresh CUDA rank takes the values of its own ZeRO-1 part alone, never the whole parameters:
// drawn (seeded_flat_values) or read from --init's weights (DrafterWeightsReader::read_flat). Rank
// 1's part starts past element 0 and ends in the padding past P. The part it hands the backend is
// bitwise that part of the whole seeded init, or of the whole imported drafter, and it has no
// parameters.
TEST(CudaTrainingRunOnCpuRanks, AFreshRankTakesOnlyItsPartOfTheInitialWeights) {
  ASSERT_EQ(world().size(), 2) << "run under mpirun -np 2";
  const DrafterConfig config = tiny_config();
  const std::filesystem::path released = shared_directory() / "released";
  std::int64_t failed = 0;  // rank 0 exports; every rank learns whether it could, then goes on
  if (world().rank() == 0) {
    try {
      MemoryTracker tracker;
      export_drafter(released, tiny_export_config(), seeded_drafter_parameters(tracker, config, config.seed + 99));
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      failed = 1;
    }
  }
  world().all_reduce(&failed, &failed, 1, CommType::i64, CommOp::sum);
  ASSERT_EQ(failed, 0);
  for (const bool from_init : {false, true}) {
    SCOPED_TRACE(from_init ? "--init" : "seeded");
    const std::filesystem::path run = shared_directory() / (from_init ? "fresh-part-init" : "fresh-part");
    MemoryTracker memory;
    TrainingRunOptions o = cuda_options_for(run, memory);
    if (from_init) o.init = released;
    o.after_step = [](std::int64_t t) {
      if (t == 0) std::raise(SIGTERM);
    };
    std::vector<double> part;
    std::int64_t offset = -1, parameters_given = -1;
    const auto make = o.make_step_backend;
    o.make_step_backend = [&](Communicator& comm, const DrafterConfig& c, const TrainingConfig& training,
                              const FrozenWeightSource& frozen, TrainingState state) {
      part = state.optimizer.master.values();
      offset = state.optimizer.offset;
      parameters_given = 0;
      state.params.for_each([&](const std::string&, const Tensor<double>& t) { parameters_given += t.numel(); });
      return make(comm, c, training, frozen, std::move(state));
    };
    ASSERT_EQ(train_on_the_world(o), 0);
    ASSERT_EQ(load_training_config(tiny_train_config_path()).zero_stage, 1);
    MemoryTracker tracker;
    const FlatLayout layout(config, 2, 1);
    const OptimizerState want =
        make_optimizer_state(tracker, layout, world().rank(),
                             from_init ? import_drafter_for_run(tracker, released, config)
                                       : seeded_drafter_parameters(tracker, config, config.seed));
    EXPECT_EQ(offset, want.offset);
    EXPECT_EQ(part, want.master.values());
    EXPECT_EQ(parameters_given, 0);
    if (world().rank() == 1) {
      EXPECT_GT(offset, 0);
      EXPECT_GT(offset + std::int64_t(part.size()), drafter_parameter_count(config))
          << "rank 1's part reaches the padding";
    }
  }
}

// Every rank takes part in each part's gather, in kOptimizerParts' order (the order the lead's
// write_run_checkpoint_from asks in: any other would pair different collectives across ranks).
TEST(CudaTrainingRunOnCpuRanks, OnlyRankZeroAsksForTheGatheredOptimizer) {
  const std::filesystem::path run = shared_directory() / "asks";
  MemoryTracker memory;
  TrainingRunOptions o = cuda_options_for(run, memory);
  o.save_every = 10;
  std::vector<GatherAsked> asked;
  o.make_step_backend = [&](Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                            const FrozenWeightSource& frozen, TrainingState state) -> std::unique_ptr<StepBackend> {
    return std::make_unique<GatherRecordingBackend>(
        cuda_options_for(run, memory).make_step_backend(comm, config, training, frozen, std::move(state)), asked);
  };
  ASSERT_EQ(train_on_the_world(o), 0);
  std::vector<GatherAsked> want;
  for (int save = 0; save < 2; ++save) {
    for (const OptimizerPart part : kOptimizerParts) want.push_back({part, world().rank() == 0});
  }
  EXPECT_EQ(asked, want) << "saves at steps 10 and 20, each part in order, taken on rank 0 alone";
}

// A checkpoint is written by rank 0 alone: the gather of the optimizer is a collective, but only
// rank 0 reads the full vectors back to the host (P floats each, 6.9 GB at full scale on each of 8
// ranks otherwise). Rank 0's are the parameters the state started from, rounded to fp32, in fp32.
TEST(CudaTrainingRunOnCpuRanks, OnlyRankZeroTakesTheGatheredOptimizerToTheHost) {
  ASSERT_EQ(world().size(), 2) << "run under mpirun -np 2";
  const DrafterConfig config = tiny_config();
  TrainingConfig training = load_training_config(tiny_train_config_path());
  MemoryTracker host, device;
  const FrozenWeights<double> frozen = load_target_weights(host, synthetic_run_data() / "target", config);
  for (const int zero_stage : {0, 1}) {
    SCOPED_TRACE(str("ZeRO-", zero_stage));
    training.zero_stage = zero_stage;
    const TrainingState state =
        make_training_state(host, config, training, world(), seeded_drafter_parameters(host, config, config.seed));
    DeviceStepBackend<HostTrainingBackend> backend(HostTrainingBackend{device}, CudaCommunicators{world(), world()},
                                                   config, training, frozen, state.optimizer);
    std::vector<std::vector<float>> gathered;  // in the master precision, fp32, as the device holds it
    for (const OptimizerPart part : kOptimizerParts) {
      FlatValues values = backend.gather_optimizer(part, /*to_this_rank=*/world().rank() == 0);
      ASSERT_TRUE(std::holds_alternative<std::vector<float>>(values));
      gathered.push_back(std::get<std::vector<float>>(std::move(values)));
    }
    if (world().rank() != 0) {
      for (const std::vector<float>& v : gathered) EXPECT_TRUE(v.empty());
      continue;
    }
    std::vector<float> want;
    for (const Tensor<double>* t : flat_tensors(state.params)) {
      for (std::int64_t e = 0; e < t->numel(); ++e) want.push_back(float((*t)[e]));
    }
    EXPECT_EQ(gathered[0], want);
    EXPECT_EQ(gathered[1], std::vector<float>(want.size(), 0.0f));
    EXPECT_EQ(gathered[2], std::vector<float>(want.size(), 0.0f));
  }
}

}  // namespace
}  // namespace dflash
