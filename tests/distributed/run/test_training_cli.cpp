// `dflash train` as a user runs it: under mpirun on 2 and 3 ranks the checkpoints agree with one
// rank within 1e-12; a run resumed on another number of ranks too; a real SIGTERM ends the run with
// a checkpoint and exit 0; the plan gate prints its table; data check, export and report. Every
// mpirun runs under `timeout` (a hang fails the test instead of stalling CI).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "common/tolerances.hpp"
#include "distributed/data/feature_dataset.hpp"
#include "distributed/metrics/svg_report.hpp"
#include "distributed/weights/drafter_export.hpp"
#include "tests/distributed/malformed_shards.hpp"
#include "tests/distributed/run_test_support.hpp"
#include "tests/support/cli_run.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using ::testing::HasSubstr;
using testing_support::run_dflash;

std::string run_args(const std::filesystem::path& out, const std::string& extra = "") {
  return "train --config '" + tiny_train_config_path().string() + "' --data '" +
         (synthetic_run_data() / "features").string() + "' --target '" + (synthetic_run_data() / "target").string() +
         "' --out '" + out.string() + "' " + extra;
}

// `timeout 60 mpirun -np R dflash <args>`, as root if need be, oversubscribed (CI has 2 cores).
testing_support::CliRun mpirun_dflash(int ranks, const std::string& args) {
  const char* env = std::getenv("DFLASH_BIN");
  const std::string bin = env != nullptr ? env : DFLASH_BIN_DEFAULT;
  ScratchDirectory wrapper;
  const auto script = wrapper / "dflash";
  {
    std::ofstream s(script);
    s << "#!/bin/sh\nexec timeout 60 " << DFLASH_MPIEXEC << " --allow-run-as-root --oversubscribe -np " << ranks << " '"
      << bin << "' \"$@\"\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  ::setenv("DFLASH_BIN", script.c_str(), 1);
  testing_support::CliRun r = run_dflash(args);
  if (env != nullptr)
    ::setenv("DFLASH_BIN", env, 1);
  else
    ::unsetenv("DFLASH_BIN");
  return r;
}

const std::filesystem::path& one_rank_run() {
  static const ScratchDirectory dir;
  static const std::filesystem::path out = [] {
    const auto r = run_dflash(run_args(dir / "run", "--save-every 10"));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return dir / "run";
  }();
  return out;
}

RunCheckpoint checkpoint_at(const std::filesystem::path& run, std::int64_t step) {
  return read_run_checkpoint(run / checkpoint_name(step), tiny_config());
}

TEST(TrainingCli, OneRankRunPrintsThePlanProgressAndSummary) {
  ScratchDirectory dir;
  const auto r = run_dflash(run_args(dir / "run", "--progress-every 5"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("plan for"));
  EXPECT_THAT(r.out, HasSubstr(": fits"));
  EXPECT_THAT(r.out, HasSubstr("policy combinations"));
  EXPECT_THAT(r.err, HasSubstr("step 5/20"));
  EXPECT_THAT(r.err, HasSubstr("step 20/20"));
  EXPECT_THAT(r.out, HasSubstr("last checkpoint"));
}

TEST(TrainingCli, TwoAndThreeRanksAgreeWithOneRankWithin1e12) {
  const RunCheckpoint one = checkpoint_at(one_rank_run(), 20);
  for (int ranks : {2, 3}) {
    ScratchDirectory dir;
    const auto r = mpirun_dflash(ranks, run_args(dir / "run"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const RunCheckpoint many = checkpoint_at(dir / "run", 20);
    EXPECT_EQ(many.world_size, ranks);
    expect_same_state_within(many, one, kReferenceTolerance);
    EXPECT_NE(many.master, checkpoint_at(one_rank_run(), 10).master);  // it did train
    // Block statistics are summed over the ranks: step 0 (the same weights on every R) counts the
    // same hits exactly; rank 0's share alone would be a third or a half of them.
    const std::vector<StepRecord> a = read_metrics_file(dir / "run" / "metrics.jsonl"),
                                  b = read_metrics_file(one_rank_run() / "metrics.jsonl");
    ASSERT_FALSE(a.empty());
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(a[0].accuracy_by_position, b[0].accuracy_by_position) << ranks;
    EXPECT_EQ(a[0].acceptance_length, b[0].acceptance_length) << ranks;
  }
}

TEST(TrainingCli, ResumeOnAnotherNumberOfRanksWithin1e12) {
  ScratchDirectory dir;
  std::filesystem::create_directories(dir / "run");
  std::filesystem::copy(one_rank_run() / "step-00000010", dir / "run" / "step-00000010",
                        std::filesystem::copy_options::recursive);
  write_whole_file(dir / "run" / "latest", "step-00000010\n");
  const auto r = mpirun_dflash(3, run_args(dir / "run", "--resume"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("written on 1 rank(s)"));
  expect_same_state_within(checkpoint_at(dir / "run", 20), checkpoint_at(one_rank_run(), 20), kReferenceTolerance);
}

TEST(TrainingCli, RealSigtermEndsTheStepSavesAndExitsZero) {
  ScratchDirectory dir;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(tiny_train_config_path()));
  j["total_steps"] = 100000;  // far more than runs before the signal
  write_whole_file(dir / "long.json", j.dump());
  const char* env = std::getenv("DFLASH_BIN");
  const std::string bin = env != nullptr ? env : DFLASH_BIN_DEFAULT;
  const std::string command = "'" + bin + "' train --config '" + (dir / "long.json").string() + "' --data '" +
                              (synthetic_run_data() / "features").string() + "' --target '" +
                              (synthetic_run_data() / "target").string() + "' --out '" + (dir / "run").string() + "'";
  // Background shell: the pid of dflash, then its exit code once it ends.
  const std::string shell = "(" + command + " >/dev/null 2>&1 & echo $! > '" + (dir / "pid").string() +
                            "'; wait $!; echo $? > '" + (dir / "rc").string() + "') &";
  ASSERT_EQ(std::system(shell.c_str()), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto metric_lines = [&] {
    std::ifstream in(dir / "run" / "metrics.jsonl");
    return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
  };
  while (metric_lines() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(metric_lines(), 3) << "the run did not start within 30 s";
  std::ifstream pid_file(dir / "pid");
  pid_t pid = 0;
  pid_file >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  while (!std::filesystem::exists(dir / "rc") &&
         std::chrono::steady_clock::now() < deadline + std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the shell finishes writing rc
  std::ifstream rc_file(dir / "rc");
  int rc = -1;
  rc_file >> rc;
  EXPECT_EQ(rc, 0);
  const auto latest = latest_checkpoint(dir / "run");
  ASSERT_TRUE(latest.has_value());
  const RunCheckpoint ck = read_run_checkpoint(*latest, tiny_config());
  EXPECT_GE(ck.step, 3);
  EXPECT_LT(ck.step, 100000);
  EXPECT_EQ(std::int64_t(read_metrics_file(dir / "run" / "metrics.jsonl").size()), ck.step);
}

// The released full-scale drafter with a run's fields: a plan that does not fit one GPU's memory.
void write_full_scale_run_config(const std::filesystem::path& path) {
  nlohmann::json j =
      nlohmann::json::parse(std::ifstream(std::filesystem::path(DFLASH_SOURCE_DIR) / "configs" / "qwen3.6-27b.json"));
  j.update({{"total_steps", 10}, {"global_batch_sequences", 8}, {"max_context", 4096}});
  write_whole_file(path, j.dump());
}

TEST(TrainingCli, PlanGateRefusesWithTheTableUnlessForced) {
  ScratchDirectory dir;
  write_full_scale_run_config(dir / "big.json");
  const auto r = run_dflash("train --config '" + (dir / "big.json").string() + "' --data x --target y --out '" +
                            (dir / "run").string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("DOES NOT FIT"));
  EXPECT_THAT(r.out, HasSubstr("policy combinations"));
  EXPECT_THAT(r.err, HasSubstr("--force"));
  EXPECT_FALSE(std::filesystem::exists(dir / "run"));
}

// --force passes the plan gate: the run goes on to its inputs (here a --data that does not exist,
// named), instead of stopping at the plan.
TEST(TrainingCli, ForceGoesPastThePlanGate) {
  ScratchDirectory dir;
  write_full_scale_run_config(dir / "big.json");
  const auto r = run_dflash("train --config '" + (dir / "big.json").string() + "' --data '" + (dir / "x").string() +
                            "' --target y --out '" + (dir / "run").string() + "' --force");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--data"));
  EXPECT_THAT(r.err, HasSubstr((dir / "x").string()));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("--force")));
}

// On R ranks each reads the values of every R-th shard: a NaN in shard 1 of 2 is rank 1's to find.
// It fails the job naming itself, the file and the tensor, while rank 0 waits at the barrier after
// validation: nothing is written, and no rank is left waiting.
TEST(TrainingCli, BadValueInAShardAnotherRankReadsFailsTheJobBeforeAnythingIsWritten) {
  ScratchDirectory dir;
  write_set_with_damaged_shard(dir / "data", [](RawShard& raw) {
    raw.tensors.at("target_features").values[5] = std::numeric_limits<double>::quiet_NaN();
  });
  const std::string args = "train --config '" + tiny_train_config_path().string() + "' --data '" +
                           (dir / "data").string() + "' --target '" + (synthetic_run_data() / "target").string() +
                           "' --out '" + (dir / "run").string() + "'";
  const auto r = mpirun_dflash(2, args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "a rank was left waiting: timeout ended the job";
  EXPECT_THAT(r.err, HasSubstr("dflash: rank 1 of 2 failed"));
  EXPECT_THAT(r.err, HasSubstr((dir / "data" / "b.safetensors").string()));
  EXPECT_THAT(r.err, HasSubstr("target_features"));
  EXPECT_FALSE(std::filesystem::exists(dir / "run")) << "the refused run wrote " << (dir / "run");
}

// --resume alone does not accept another data set (only --allow-other-data does).
TEST(TrainingCli, ResumeOnAnotherDataSetNeedsAllowOtherData) {
  ScratchDirectory dir;
  std::filesystem::copy(one_rank_run(), dir / "run", std::filesystem::copy_options::recursive);
  std::filesystem::remove_all(dir / "run" / "step-00000020");
  std::filesystem::remove(dir / "run" / kLatestFileName);
  write_whole_file(dir / "run" / kLatestFileName, "step-00000010\n");
  SyntheticDataSpec spec;
  spec.sequences = 24;
  spec.shards = 3;
  write_synthetic_data(tiny_config(), spec, dir / "other");
  const std::string args =
      "train --config '" + tiny_train_config_path().string() + "' --data '" + (dir / "other" / "features").string() +
      "' --target '" + (synthetic_run_data() / "target").string() + "' --out '" + (dir / "run").string() + "' --resume";
  const auto refused = run_dflash(args);
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("--allow-other-data"));
  const auto allowed = run_dflash(args + " --allow-other-data");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
}

// `data synth` writes sequences of --min-length to --max-length rows.
TEST(TrainingCli, DataSynthLengthsFollowTheFlags) {
  ScratchDirectory dir;
  const auto r = run_dflash("data synth --config '" + tiny_train_config_path().string() + "' --out '" +
                            (dir / "syn").string() + "' --sequences 12 --shards 1 --min-length 5 --max-length 9");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const FeatureDataset d = FeatureDataset::open(dir / "syn" / "features", FeatureSetShape::of(tiny_config()));
  ASSERT_EQ(d.num_sequences(), 12);
  for (std::int64_t i = 0; i < d.num_sequences(); ++i) {
    EXPECT_GE(d.sequence_length(i), 5) << i;
    EXPECT_LE(d.sequence_length(i), 9) << i;
  }
}

// A --target given to export is checked against the depth the run recorded, whenever it recorded one.
TEST(TrainingCli, ExportWithATargetOfAnotherDepthIsRefused) {
  ScratchDirectory dir;
  std::filesystem::copy(synthetic_run_data() / "target", dir / "target", std::filesystem::copy_options::recursive);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "target" / "config.json"));
  j["num_hidden_layers"] = 6;
  std::filesystem::remove(dir / "target" / "config.json");
  write_whole_file(dir / "target" / "config.json", j.dump());
  const auto r = run_dflash("export --checkpoint '" + one_rank_run().string() + "' --out '" +
                            (dir / "drafter").string() + "' --target '" + (dir / "target").string() + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("num_target_layers"));
  EXPECT_FALSE(std::filesystem::exists(dir / "drafter"));
}

TEST(TrainingCli, DataCheckExportAndReport) {
  const auto check = run_dflash("data check '" + (synthetic_run_data() / "features").string() + "' --config '" +
                                tiny_train_config_path().string() + "'");
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_THAT(check.out, HasSubstr("OK: 2 shard(s), 24 sequences"));

  ScratchDirectory dir;
  const auto exported =
      run_dflash("export --checkpoint '" + one_rank_run().string() + "' --out '" + (dir / "drafter").string() + "'");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_THAT(exported.out, HasSubstr("step-00000020"));
  MemoryTracker tracker;
  const ImportedDrafter d = import_drafter(tracker, dir / "drafter");
  const RunCheckpoint ck = checkpoint_at(one_rank_run(), 20);
  std::vector<double> flat;
  d.params.for_each(
      [&](const std::string&, const Tensor<double>& t) { flat.insert(flat.end(), t.span().begin(), t.span().end()); });
  ASSERT_EQ(flat.size(), ck.master.size());
  // bf16 keeps 8 significant bits: rounding moves a weight by at most half an ulp, 2^-8 of its size.
  for (std::size_t i = 0; i < flat.size(); ++i)
    ASSERT_LE(std::abs(flat[i] - ck.master[i]), std::abs(ck.master[i]) * 0x1p-8) << i;

  const auto again =
      run_dflash("export --checkpoint '" + one_rank_run().string() + "' --out '" + (dir / "drafter").string() + "'");
  EXPECT_NE(again.exit_code, 0);
  EXPECT_THAT(again.err, HasSubstr("not an empty directory"));

  // The export says the target's depth (data synth's target: 4), not K = 2.
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "drafter" / "config.json"));
  EXPECT_EQ(config.at("num_target_layers"), 4);

  const auto report = run_dflash("report '" + one_rank_run().string() + "' --out '" + (dir / "r.svg").string() + "'");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_TRUE(std::filesystem::file_size(dir / "r.svg") > 1000);
}

TEST(TrainingCli, ExportOfACheckpointWithoutTheTargetDepthNeedsTarget) {
  // A checkpoint written before runs recorded num_target_layers.
  ScratchDirectory dir;
  std::filesystem::copy(one_rank_run() / "step-00000020", dir / "old");
  nlohmann::json state = nlohmann::json::parse(std::ifstream(dir / "old" / kTrainerStateFileName));
  ASSERT_EQ(state.at("config").erase("num_target_layers"), 1u);
  std::filesystem::remove(dir / "old" / kTrainerStateFileName);
  write_whole_file(dir / "old" / kTrainerStateFileName, state.dump());

  const auto refused =
      run_dflash("export --checkpoint '" + (dir / "old").string() + "' --out '" + (dir / "a").string() + "'");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("num_target_layers"));
  EXPECT_THAT(refused.err, HasSubstr("--target"));
  EXPECT_FALSE(std::filesystem::exists(dir / "a"));

  const auto exported =
      run_dflash("export --checkpoint '" + (dir / "old").string() + "' --out '" + (dir / "b").string() +
                 "' --target '" + (synthetic_run_data() / "target").string() + "'");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir / "b" / "config.json")).at("num_target_layers"), 4);
}

}  // namespace
}  // namespace dflash
