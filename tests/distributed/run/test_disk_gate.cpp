// The disk gate of `dflash train` (distributed/run/disk_gate.hpp): which steps save, how many
// checkpoints a run adds to --out at once (against the directories real saves leave, --keep
// pruning included), and the run refused before it writes anything when they do not fit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <limits>

#include "distributed/checkpoint/save_restore.hpp"
#include "distributed/metrics/step_record.hpp"
#include "distributed/run/disk_gate.hpp"
#include "distributed/run/evaluation.hpp"
#include "distributed/run/plan_gate.hpp"
#include "distributed/training_config.hpp"
#include "io/errors.hpp"
#include "tests/distributed/run_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using ::testing::HasSubstr;

TEST(DiskGate, SavesAfterEverySaveEveryThStepAndAfterTheLast) {
  std::vector<std::int64_t> saved;
  for (std::int64_t t = 0; t < 20; ++t) {
    if (saves_after_step(t, 20, 7)) saved.push_back(t);
  }
  EXPECT_EQ(saved, (std::vector<std::int64_t>{6, 13, 19}));
  for (std::int64_t t = 0; t < 19; ++t) EXPECT_FALSE(saves_after_step(t, 20, 0)) << t;
  EXPECT_TRUE(saves_after_step(19, 20, 0));
  EXPECT_TRUE(saves_after_step(9, 20, 10));
  EXPECT_FALSE(saves_after_step(10, 20, 10));
}

// The checkpoints a run's saves leave on disk, counted one save at a time as write_run_checkpoint
// leaves them (the K most recent after each, K + 1 while one is written): the most at once,
// less the `existing` the run started with. A loop over the saves, not the closed form.
std::int64_t most_added_by_simulation(std::int64_t first, std::int64_t total, std::int64_t save_every,
                                      std::int64_t keep, std::int64_t existing) {
  std::int64_t on_disk = existing, most = existing;
  for (std::int64_t t = first; t < total; ++t) {
    if (!saves_after_step(t, total, save_every)) continue;
    ++on_disk;
    most = std::max(most, on_disk);
    if (keep > 0) on_disk = std::min(on_disk, keep);
  }
  return most - existing;
}

TEST(DiskGate, CheckpointsAddedAtMostIsWhatTheSavesLeaveOneAtATime) {
  for (std::int64_t total = 0; total <= 13; ++total) {
    for (std::int64_t first = 0; first <= total + 1; ++first) {
      for (std::int64_t save_every = 0; save_every <= 5; ++save_every) {
        for (std::int64_t keep = 0; keep <= 4; ++keep) {
          for (std::int64_t existing = 0; existing <= 5; ++existing) {
            ASSERT_EQ(checkpoints_added_at_most(first, total, save_every, keep, existing),
                      most_added_by_simulation(first, total, save_every, keep, existing))
                << "first " << first << " total " << total << " save_every " << save_every << " keep " << keep
                << " existing " << existing;
          }
        }
      }
    }
  }
  // A long run in closed form: 100,000 steps saved every 1,000, all kept; the last is one of them.
  EXPECT_EQ(checkpoints_added_at_most(0, 100'000, 1'000, 0, 0), 100);
  EXPECT_EQ(checkpoints_added_at_most(500, 100'001, 1'000, 0, 0), 101);
}

// The real saves: write_run_checkpoint with --keep K after each step that saves, with `existing`
// checkpoints already there (at steps up to the first), counting the complete directories once
// each is renamed into place and before the oldest are removed: the most at once, less those that
// were there, is checkpoints_added_at_most's.
TEST(DiskGate, CheckpointsAddedAtMostIsWhatRealSavesLeaveOnDisk) {
  const DrafterConfig c = tiny_config();
  struct Case {
    std::int64_t first, total, save_every, keep, existing;
  };
  for (const Case& k : {Case{0, 7, 2, 0, 0}, Case{0, 7, 2, 2, 0}, Case{0, 7, 3, 1, 0}, Case{3, 9, 2, 2, 3},
                        Case{3, 9, 2, 5, 1}, Case{0, 5, 0, 0, 0}, Case{4, 9, 1, 2, 4}, Case{2, 8, 3, 1, 2}}) {
    SCOPED_TRACE(str("first ", k.first, " total ", k.total, " save_every ", k.save_every, " keep ", k.keep,
                     " existing ", k.existing));
    ScratchDirectory run;
    RunCheckpoint ck;
    ck.config = drafter_config_to_json(c);
    const auto P = std::size_t(drafter_parameter_count(c));
    ck.master.assign(P, 0.5);
    ck.exp_avg.assign(P, 0.0);
    ck.exp_avg_sq.assign(P, 0.0);
    for (std::int64_t s = k.first - k.existing + 1; s <= k.first; ++s) {
      ck.step = s;
      write_run_checkpoint(run.path(), c, ck);
    }
    ASSERT_EQ(std::int64_t(run_checkpoints(run.path()).size()), k.existing);
    std::int64_t most = k.existing;
    CheckpointWriteOptions options{safetensors::Dtype::F32, k.keep, {}};
    options.observer = [&](CheckpointPhase phase) {
      if (phase == CheckpointPhase::renamed) most = std::max(most, std::int64_t(run_checkpoints(run.path()).size()));
    };
    for (std::int64_t t = k.first; t < k.total; ++t) {
      if (!saves_after_step(t, k.total, k.save_every)) continue;
      ck.step = t + 1;
      write_run_checkpoint(run.path(), c, ck, options);
    }
    EXPECT_EQ(checkpoints_added_at_most(k.first, k.total, k.save_every, k.keep, k.existing), most - k.existing);
  }
}

TEST(DiskGate, NeededIsTheCheckpointsTimesTheirBytesAndTheRecordsAndSaturates) {
  const DiskPlan plan{1'000, 3, 3'049, 50};
  EXPECT_EQ(plan.needed(), 3'050u);
  EXPECT_FALSE(plan.fits());
  EXPECT_TRUE((DiskPlan{1'000, 3, 3'050, 50}.fits()));
  EXPECT_TRUE((DiskPlan{1'000, 0, 0}.fits()));
  EXPECT_EQ((DiskPlan{std::uint64_t(1) << 62, 8, 0}.needed()), ~std::uint64_t(0));
  EXPECT_EQ((DiskPlan{std::uint64_t(1) << 62, 3, 0, std::uint64_t(1) << 62}.needed()), ~std::uint64_t(0));
}

// A line of each file per step, and per evaluation (after steps t with (t + 1) % eval_every == 0),
// from the run's first step on (a resume's).
TEST(DiskGate, RecordLinesAreOneAStepAndOneAnEvaluation) {
  EXPECT_EQ(record_lines_added_at_most(0, 20, 0, 100, 70), 2'000u);
  EXPECT_EQ(record_lines_added_at_most(0, 20, 5, 100, 70), 2'000u + 4 * 70);   // after 4, 9, 14, 19
  EXPECT_EQ(record_lines_added_at_most(10, 20, 5, 100, 70), 1'000u + 2 * 70);  // after 14, 19
  EXPECT_EQ(record_lines_added_at_most(9, 20, 5, 100, 70), 1'100u + 3 * 70);   // after 9, 14, 19
  EXPECT_EQ(record_lines_added_at_most(0, 7, 3, 100, 70), 700u + 2 * 70);      // after 2, 5
  EXPECT_EQ(record_lines_added_at_most(20, 20, 5, 100, 70), 0u);               // resumed at the end
}

// Every number in j at its longest text: doubles as -2.2250738585072014e-308, integers as -2^63.
void lengthen_numbers(nlohmann::json& j) {
  if (j.is_number_float()) j = -2.2250738585072014e-308;
  if (j.is_number_integer()) j = std::numeric_limits<std::int64_t>::min();
  if (j.is_structured()) {
    for (auto& child : j) lengthen_numbers(child);
  }
}

// A run with evaluation counts both files' lines: one byte short of its checkpoint and every line at
// its longest, it is refused; with that, it trains, and every line it writes is within the bound. The
// longest record reads back.
TEST(DiskGate, RecordLineBoundsHoldEveryLineARunWrites) {
  const std::int64_t B = tiny_config().block_size;
  const std::uint64_t step_line = step_record_line_bytes_at_most(B), eval_line = eval_record_line_bytes_at_most(B);
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.eval_data = synthetic_run_data() / "features";
  o.eval_every = 5;
  const std::uint64_t needed = checkpoint_bytes(tiny_config(), safetensors::Dtype::F64) +  // saved at the end
                               record_lines_added_at_most(0, 20, 5, step_line, eval_line);
  o.available_disk_bytes = [&](const std::filesystem::path&) { return needed - 1; };
  EXPECT_THAT(input_error_message([&] { train(o); }), HasSubstr("--out"));
  o.available_disk_bytes = [&](const std::filesystem::path&) { return needed; };
  ASSERT_EQ(train(o), 0);
  const std::pair<const char*, std::uint64_t> files[] = {{"metrics.jsonl", step_line}, {"eval.jsonl", eval_line}};
  std::uint64_t written = 0;
  for (const auto& [name, bound] : files) {
    std::ifstream in(o.out / name);
    int lines = 0;
    for (std::string line; std::getline(in, line); ++lines) {
      EXPECT_LE(line.size() + 1, bound) << name << ": " << line;
      // The same record with every number at its longest text: a line the run could write.
      nlohmann::json longest = nlohmann::json::parse(line);
      lengthen_numbers(longest);
      EXPECT_LE(longest.dump().size() + 1, bound) << name << ": " << longest.dump();
    }
    EXPECT_GT(lines, 0) << name;
    written += std::filesystem::file_size(o.out / name);
  }
  EXPECT_LE(written, record_lines_added_at_most(0, 20, 5, step_line, eval_line));
  EXPECT_GT(step_line, 500u);  // a dozen doubles, B accuracies and ten categories at their longest

  StepRecord longest;
  static_cast<RecordStatistics&>(longest) = longest_record_statistics(B);
  EXPECT_EQ(step_record_from_json(nlohmann::json::parse(step_record_json(longest).dump())).accuracy_by_position,
            longest.accuracy_by_position);
}

TEST(DiskGate, AvailableBytesAreAskedOfTheNearestExistingFolder) {
  ScratchDirectory dir;
  const std::uint64_t here = available_disk_bytes(dir.path());
  EXPECT_GT(here, 0u);
  const std::uint64_t below = available_disk_bytes(dir / "not" / "yet" / "made");
  // The same filesystem: equal up to what other processes wrote in between (1 GB).
  EXPECT_LT(std::max(here, below) - std::min(here, below), std::uint64_t(1) << 30);
  EXPECT_FALSE(std::filesystem::exists(dir / "not")) << "asking made the folder";
}

// The bytes the tiny run's metrics.jsonl lines take at the most from first_step on (no evaluation).
std::uint64_t tiny_run_records(std::int64_t first_step) {
  const TrainingConfig training = load_training_config(tiny_train_config_path());
  return record_lines_added_at_most(first_step, training.total_steps, 0,
                                    step_record_line_bytes_at_most(tiny_config().block_size), 0);
}

// The bytes the tiny run's checkpoints and records need, from the library's own count.
std::uint64_t tiny_run_needs(std::int64_t save_every, std::int64_t keep) {
  const DrafterConfig c = tiny_config();
  const TrainingConfig training = load_training_config(tiny_train_config_path());
  return checkpoint_bytes(c, master_dtype_of(TrainingBackend::cpu)) *
             std::uint64_t(checkpoints_added_at_most(0, training.total_steps, save_every, keep, 0)) +
         tiny_run_records(0);
}

// One byte short, the run is refused naming --out, the bytes and the ways out, and writes nothing;
// with exactly enough it trains, and says so; one byte short with --force it trains too.
TEST(DiskGate, ARunWhoseCheckpointsDoNotFitIsRefusedBeforeAnythingIsWritten) {
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.save_every = 5;
  o.keep = 0;
  const std::uint64_t needed = tiny_run_needs(5, 0);
  ASSERT_EQ(needed, checkpoint_bytes(tiny_config(), safetensors::Dtype::F64) * 4 + tiny_run_records(0))
      << "saves after 5, 10, 15, 20, and 20 lines of metrics";
  std::filesystem::path asked;
  o.available_disk_bytes = [&](const std::filesystem::path& p) {
    asked = p;
    return needed - 1;
  };
  const std::string message = input_error_message([&] { train(o); });
  EXPECT_THAT(message, HasSubstr("--out"));
  EXPECT_THAT(message, HasSubstr("up to 4 at once"));
  EXPECT_THAT(message, HasSubstr("--keep"));
  EXPECT_THAT(message, HasSubstr("--force"));
  EXPECT_THAT(message, HasSubstr((dir / "run").string()));
  EXPECT_EQ(asked, dir / "run");
  EXPECT_FALSE(std::filesystem::exists(o.out)) << "the refused run wrote " << o.out;

  o.available_disk_bytes = [&](const std::filesystem::path&) { return needed; };
  std::string log;
  ASSERT_EQ(train(o, &log), 0);
  EXPECT_THAT(log, HasSubstr("checkpoints: up to 4 at once"));
  EXPECT_THAT(log, HasSubstr(": fits"));
  EXPECT_EQ(run_checkpoints(o.out).size(), 4u);

  ScratchDirectory forced;
  o.out = forced / "run";
  o.force = true;
  o.available_disk_bytes = [&](const std::filesystem::path&) { return needed - 1; };
  ASSERT_EQ(train(o, &log), 0);
  EXPECT_THAT(log, HasSubstr("does NOT fit"));
}

// --keep 2 with saves every 5 steps: 3 at once (two kept, a third written before the oldest goes).
// A resume from step 10 with both of its checkpoints there adds 1.
TEST(DiskGate, KeepAndAResumeCountWhatIsAlreadyThere) {
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.save_every = 5;
  o.keep = 2;
  const std::uint64_t one = checkpoint_bytes(tiny_config(), safetensors::Dtype::F64);
  EXPECT_EQ(tiny_run_needs(5, 2), 3 * one + tiny_run_records(0));
  o.available_disk_bytes = [&](const std::filesystem::path&) { return 3 * one + tiny_run_records(0); };
  o.after_step = [](std::int64_t t) {
    if (t == 9) std::raise(SIGTERM);
  };
  ASSERT_EQ(train(o), 0);
  ASSERT_EQ(run_checkpoints(o.out).size(), 2u);
  o.after_step = nullptr;
  o.resume = true;
  const std::uint64_t resumed = one + tiny_run_records(10);  // steps 10..19's lines
  o.available_disk_bytes = [&](const std::filesystem::path&) { return resumed - 1; };
  const std::string message = input_error_message([&] { train(o); });
  EXPECT_THAT(message, HasSubstr("up to 1 at once"));
  o.available_disk_bytes = [&](const std::filesystem::path&) { return resumed; };
  EXPECT_EQ(train(o), 0);
}

}  // namespace
}  // namespace dflash
