// `dflash train --backend cuda` in process on one rank, with the CUDA step's own code on the CPU's
// training backend in place of the GPU's (TrainingRunOptions::make_step_backend:
// DeviceStepBackend<HostTrainingBackend>): everything of the CUDA run that is not a kernel, cuBLAS
// or NCCL runs here before ci/gpu runs it on a GPU: the plan gate for the CUDA step, the state put
// into the backend's memory from a fresh or restored host state, the steps, the forward alone for
// evaluation, F32 checkpoints, and a resume on either backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <optional>
#include <span>

#include "distributed/metrics/svg_report.hpp"
#include "distributed/weights/target_tensors.hpp"
#include "reference/storage_pool.hpp"
#include "tests/distributed/run/cuda_run_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using ::testing::HasSubstr;

// The uninterrupted 20-step runs, made once: the reference's and the CUDA step's.
const std::filesystem::path& reference_run() {
  static const ScratchDirectory dir;
  static const std::filesystem::path out = [] {
    EXPECT_EQ(train(options_for(dir / "run")), 0);
    return dir / "run";
  }();
  return out;
}
const std::filesystem::path& cuda_run() {
  static const ScratchDirectory dir;
  static MemoryTracker memory;
  static const std::filesystem::path out = [] {
    TrainingRunOptions o = cuda_options_for(dir / "run", memory);
    o.save_every = 10;
    EXPECT_EQ(train(o), 0);
    return dir / "run";
  }();
  return out;
}

bool all_fp32(const std::vector<double>& values) {
  for (const double v : values) {
    if (double(float(v)) != v) return false;
  }
  return true;
}

// The same data, schedule and rows as the reference run, step by step (what precision cannot
// change: tokens, truncated sequences, lr exactly); the loss falls as the reference's does; the
// checkpoints hold fp32 values; the peaks are the backend's, with the flat fp32 gradient in them.
// The plan gate holds the CUDA step to the ranks' GPU (TrainingRunOptions::device_bytes in place of
// cuda_device_bytes): the tiny step needs a few hundred KB, so a 2 GiB GPU, all headroom, refuses
// it before --out is made, and a 3 GiB one runs it; the run says which memory it planned against.
TEST(CudaTrainingRunOnTheCpu, ThePlanGateHoldsTheStepToTheRanksGpu) {
  ScratchDirectory dir;
  MemoryTracker memory;
  TrainingRunOptions o = cuda_options_for(dir / "run", memory);
  o.device_bytes = [](Communicator&) { return std::optional<std::int64_t>(std::int64_t(2) << 30); };
  EXPECT_THAT(input_error_message([&] { train(o); }), HasSubstr("the training step does not fit"));
  EXPECT_FALSE(std::filesystem::exists(o.out));
  o.device_bytes = [](Communicator&) { return std::optional<std::int64_t>(std::int64_t(3) << 30); };
  std::string log;
  ASSERT_EQ(train(o, &log), 0);
  EXPECT_THAT(log, HasSubstr("GPU memory per rank 3.22 GB (the smallest of the ranks' GPUs)"));
  EXPECT_THAT(log, HasSubstr("device 3,221,225,472 B"));
}

TEST(CudaTrainingRunOnTheCpu, FollowsTheReferenceRunsDataAndScheduleAndLearns) {
  const std::vector<StepRecord> cuda = read_metrics_file(cuda_run() / "metrics.jsonl"),
                                reference = read_metrics_file(reference_run() / "metrics.jsonl");
  ASSERT_EQ(cuda.size(), 20u);
  ASSERT_EQ(reference.size(), 20u);
  for (std::size_t t = 0; t < cuda.size(); ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    EXPECT_EQ(cuda[t].step, reference[t].step);
    EXPECT_EQ(cuda[t].tokens, reference[t].tokens);
    EXPECT_EQ(cuda[t].truncated_sequences, reference[t].truncated_sequences);
    EXPECT_EQ(cuda[t].lr, reference[t].lr);
    EXPECT_TRUE(std::isfinite(cuda[t].loss));
    EXPECT_EQ(cuda[t].accuracy_by_position.size(), 3u);
    EXPECT_GT(cuda[t].peak_bytes.at("gradients"), 0);
  }
  const double first = (cuda[0].loss + cuda[1].loss + cuda[2].loss) / 3;
  const double last = (cuda[17].loss + cuda[18].loss + cuda[19].loss) / 3;
  EXPECT_LT(last, 0.85 * first) << "loss " << first << " -> " << last;
  const RunCheckpoint ck = read_run_checkpoint(cuda_run() / "step-00000020", tiny_config());
  EXPECT_EQ(ck.step, 20);
  EXPECT_EQ(ck.data_cursor, read_run_checkpoint(reference_run() / "step-00000020", tiny_config()).data_cursor);
  EXPECT_TRUE(all_fp32(ck.master));
  EXPECT_TRUE(all_fp32(ck.exp_avg));
  EXPECT_TRUE(all_fp32(ck.exp_avg_sq));
  EXPECT_NE(ck.master, read_run_checkpoint(cuda_run() / "step-00000010", tiny_config()).master);
}

// A SIGTERM mid-run saves (F32) and exits 0; the resumed run ends bitwise the uninterrupted one:
// the restored state is exactly the one saved (fp32 values survive the F32 file and the double
// host state), the data cursor and the schedule go on where they stopped.
TEST(CudaTrainingRunOnTheCpu, SigtermThenResumeIsBitwiseTheUninterruptedRun) {
  ScratchDirectory dir;
  MemoryTracker memory;
  TrainingRunOptions o = cuda_options_for(dir / "run", memory);
  o.after_step = [](std::int64_t t) {
    if (t == 6) std::raise(SIGTERM);
  };
  // The parameters the backend is made with: none, on a fresh start (the initial ones are freed once
  // the rank's optimizer part is made) and on a resume (a CUDA rank reads only its optimizer part of
  // the checkpoint).
  std::int64_t parameters_given = -1;
  const auto make = o.make_step_backend;
  o.make_step_backend = [&](Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                            const FrozenWeightSource& frozen, TrainingState state) {
    parameters_given = 0;
    state.params.for_each([&](const std::string&, const Tensor<double>& t) { parameters_given += t.numel(); });
    return make(comm, config, training, frozen, std::move(state));
  };
  std::string log;
  ASSERT_EQ(train(o, &log), 0);
  EXPECT_THAT(log, HasSubstr("stopped by signal"));
  EXPECT_EQ(latest_checkpoint(dir / "run"), dir / "run" / "step-00000007");
  EXPECT_EQ(parameters_given, 0);
  o.after_step = nullptr;
  o.resume = true;
  ASSERT_EQ(train(o, &log), 0);
  EXPECT_THAT(log, HasSubstr("resuming from"));
  EXPECT_EQ(parameters_given, 0);
  for (const char* file : {kModelFileName, kOptimizerFileName, kTrainerStateFileName}) {
    EXPECT_EQ(file_text(dir / "run" / "step-00000020" / file), file_text(cuda_run() / "step-00000020" / file)) << file;
  }
  const std::vector<StepRecord> a = read_metrics_file(dir / "run" / "metrics.jsonl"),
                                b = read_metrics_file(cuda_run() / "metrics.jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t t = 0; t < a.size(); ++t) EXPECT_EQ(a[t].loss, b[t].loss) << t;
}

// The frozen weights go from the target's files to the backend that uses them, read once: the
// backend is given the target itself (TargetWeights, opened and checked, no value read), not
// weights the run read first, and reads each element of E and W_lm once, in pieces of at most
// kFrozenPieceElements. A device backend keeps only its bf16 copy (so a CUDA rank never holds the
// 2 V H doubles, 20 GB at full scale, on its host); the reference keeps them whole. Under either,
// the storage pool holds no cached block once the backend is made.
TEST(CudaTrainingRunOnTheCpu, TheBackendReadsTheTargetItselfEachValueOnce) {
  class CountingSource final : public FrozenWeightSource {
   public:
    explicit CountingSource(const FrozenWeightSource& inner) : inner_(inner) {}
    void read(FrozenTensor which, std::int64_t first, std::span<double> out) const override {
      largest_read = std::max(largest_read, std::int64_t(out.size()));
      for (std::size_t i = 0; i < out.size(); ++i) ++reads[which == FrozenTensor::lm_head][first + std::int64_t(i)];
      inner_.read(which, first, out);
    }
    mutable std::map<std::int64_t, int> reads[2];  // per tensor: element -> times read
    mutable std::int64_t largest_read = 0;

   private:
    const FrozenWeightSource& inner_;
  };
  const std::int64_t n = tiny_config().vocab_size * tiny_config().hidden_size;
  for (const bool cuda : {true, false}) {
    SCOPED_TRACE(cuda ? "CUDA step" : "reference");
    ScratchDirectory dir;
    MemoryTracker memory, reference_memory;
    TrainingRunOptions o = cuda ? cuda_options_for(dir / "run", memory) : options_for(dir / "run");
    bool given_the_target = false;
    std::optional<CountingSource> counted;
    const auto make = o.make_step_backend;
    o.make_step_backend = [&](Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                              const FrozenWeightSource& target, TrainingState state) {
      given_the_target = dynamic_cast<const TargetWeights*>(&target) != nullptr;
      const CountingSource& source = counted.emplace(target);
      return make ? make(comm, config, training, source, std::move(state))
                  : make_reference_step_backend(reference_memory, comm, config, training, source, std::move(state));
    };
    std::size_t cached_after_start = 1, frozen_on_backend = 1, frozen_on_host = 1;
    o.after_start = [&] {
      cached_after_start = storage_pool_state().cached_bytes;
      frozen_on_backend = memory.current(MemoryCategory::frozen);
      frozen_on_host = reference_memory.current(MemoryCategory::frozen);
    };
    o.after_step = [&](std::int64_t t) {
      if (t == 0) std::raise(SIGTERM);
    };
    ASSERT_EQ(train(o), 0);
    EXPECT_TRUE(given_the_target);
    ASSERT_TRUE(counted.has_value());
    for (const auto& reads : counted->reads) {
      EXPECT_EQ(std::int64_t(reads.size()), n);
      for (const auto& [element, times] : reads) ASSERT_EQ(times, 1) << element;
    }
    EXPECT_LE(counted->largest_read, kFrozenPieceElements);
    // The bf16 copies on the backend; none on the host under the CUDA step, both in double under
    // the reference.
    EXPECT_EQ(frozen_on_backend, cuda ? std::size_t(2 * n) * sizeof(Bf16Bits) : 0u);
    EXPECT_EQ(frozen_on_host, cuda ? 0u : std::size_t(2 * n) * sizeof(double));
    // The storage pool's cache released once the backend is made: it would keep the blocks of the
    // start's tensors (parameters, optimizer state) for the whole run.
    EXPECT_EQ(cached_after_start, 0u);
  }
}

// A run stopped on one backend resumes on the other (TRAINING §15: one checkpoint format): the
// reference's F64 checkpoint goes on under the CUDA step (its master rounded to fp32 on the way
// in), the CUDA step's F32 one under the reference, each to step 20 with the uninterrupted runs'
// data and schedule.
TEST(CudaTrainingRunOnTheCpu, ARunResumesOnTheOtherBackend) {
  for (const bool cuda_first : {false, true}) {
    SCOPED_TRACE(cuda_first ? "CUDA, then the reference" : "the reference, then CUDA");
    ScratchDirectory dir;
    MemoryTracker memory;
    TrainingRunOptions first = cuda_first ? cuda_options_for(dir / "run", memory) : options_for(dir / "run");
    first.after_step = [](std::int64_t t) {
      if (t == 6) std::raise(SIGTERM);
    };
    ASSERT_EQ(train(first), 0);
    TrainingRunOptions second = cuda_first ? options_for(dir / "run") : cuda_options_for(dir / "run", memory);
    second.resume = true;
    std::string log;
    ASSERT_EQ(train(second, &log), 0);
    EXPECT_THAT(log, HasSubstr("resuming from"));
    const std::vector<StepRecord> a = read_metrics_file(dir / "run" / "metrics.jsonl"),
                                  b = read_metrics_file(reference_run() / "metrics.jsonl");
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t t = 0; t < a.size(); ++t) {
      EXPECT_EQ(a[t].tokens, b[t].tokens) << t;
      EXPECT_EQ(a[t].lr, b[t].lr) << t;
    }
    const RunCheckpoint ck = read_run_checkpoint(dir / "run" / "step-00000020", tiny_config());
    EXPECT_EQ(ck.step, 20);
    EXPECT_EQ(all_fp32(ck.master), !cuda_first) << "the last backend's master precision";
  }
}

// Held-out evaluation on the working copy (the forward alone): a record every 5 steps over the
// whole set, its loss falling, and training untouched by it (the same final weights as the run
// without evaluation).
TEST(CudaTrainingRunOnTheCpu, HeldOutEvaluationRunsTheForwardAloneOnTheWorkingCopy) {
  ScratchDirectory dir;
  MemoryTracker memory;
  expect_held_out_evaluation(cuda_options_for(dir / "run", memory), cuda_run());
}

}  // namespace
}  // namespace dflash
