// Run checkpoints (TRAINING §15): exact round trip, `latest`, --keep, refusal of a damaged or
// missing file naming it, and a write killed at every phase leaving `latest` and the checkpoint
// it names intact.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "distributed/checkpoint/save_restore.hpp"
#include "reference/drafter_parameters.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using ::testing::HasSubstr;

RunCheckpoint example(const DrafterConfig& c, std::int64_t step) {
  RunCheckpoint ck;
  ck.step = step;
  ck.data_cursor = {step / 3, step % 3};
  ck.seed = 0xFFFFFFFFFFFFull;
  ck.tokens_seen = 1000 * step;
  ck.config = drafter_config_to_json(c);
  ck.world_size = 3;
  const auto P = static_cast<std::size_t>(drafter_parameter_count(c));
  CounterRng rng(std::uint64_t(step), 1);
  for (auto* v : {&ck.master, &ck.exp_avg, &ck.exp_avg_sq}) {
    v->resize(P);
    for (double& x : *v) x = rng.uniform(-1, 1) * 1e-3 / 3.0;  // not representable in F32: F64 must be exact
  }
  return ck;
}

void expect_equal(const RunCheckpoint& a, const RunCheckpoint& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.data_cursor, b.data_cursor);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.tokens_seen, b.tokens_seen);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.master, b.master);
  EXPECT_EQ(a.exp_avg, b.exp_avg);
  EXPECT_EQ(a.exp_avg_sq, b.exp_avg_sq);
}

TEST(RunCheckpoint, RoundTripIsExactAndLatestNamesIt) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  const RunCheckpoint ck = example(c, 7);
  const auto dir = write_run_checkpoint(run.path(), c, ck);
  EXPECT_EQ(dir, run / "step-00000007");
  EXPECT_EQ(latest_checkpoint(run.path()), dir);
  EXPECT_FALSE(std::filesystem::exists(run / "step-00000007.tmp"));
  expect_equal(read_run_checkpoint(dir, c), ck);
  // Names of SPEC §3 and the optimizer's prefixes.
  const auto optimizer = safetensors::Reader::open_file(dir / kOptimizerFileName);
  EXPECT_TRUE(optimizer.contains("exp_avg/layers.1.mlp.down_proj.weight"));
  EXPECT_TRUE(optimizer.contains("exp_avg_sq/fc.weight"));
  EXPECT_EQ(safetensors::Reader::open_file(dir / kModelFileName).info("norm.weight").dtype, safetensors::Dtype::F64);
}

TEST(RunCheckpoint, KeepRemovesAllButTheMostRecent) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  for (std::int64_t step : {2, 4, 6, 8})
    write_run_checkpoint(run.path(), c, example(c, step), {safetensors::Dtype::F64, 2, {}});
  EXPECT_EQ(run_checkpoints(run.path()),
            (std::vector<std::filesystem::path>{run / "step-00000006", run / "step-00000008"}));
  EXPECT_EQ(latest_checkpoint(run.path()), run / "step-00000008");
}

TEST(RunCheckpoint, AlteredFileIsRefusedNamingItAndTheHashes) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  const auto dir = write_run_checkpoint(run.path(), c, example(c, 1));
  std::vector<std::byte> bytes = read_whole_file(dir / kOptimizerFileName);
  bytes[bytes.size() - 3] ^= std::byte{1};  // one bit of one moment
  write_whole_file(dir / kOptimizerFileName, bytes);
  const std::string message = input_error_message([&] { read_run_checkpoint(dir, c); });
  EXPECT_THAT(message, HasSubstr((dir / kOptimizerFileName).string()));
  EXPECT_THAT(message, HasSubstr("does not match"));
}

TEST(RunCheckpoint, MissingFileIsRefusedNamingIt) {
  const DrafterConfig c = tiny_config();
  for (const char* file : {kModelFileName, kOptimizerFileName, kTrainerStateFileName}) {
    ScratchDirectory run;
    const auto dir = write_run_checkpoint(run.path(), c, example(c, 1));
    std::filesystem::remove(dir / file);
    const std::string message = input_error_message([&] { read_run_checkpoint(dir, c); });
    EXPECT_THAT(message, HasSubstr((dir / file).string())) << file;
    EXPECT_THAT(message, HasSubstr("missing")) << file;
  }
}

// An integer of trainer_state.json given as a fraction, a float beyond its type or an integer
// beyond it was converted by nlohmann's get<> (1.5 read as 1; 1e300 undefined behaviour, found by
// fuzz/trainer_state under UBSan): each is refused, naming the file and the key.
TEST(RunCheckpoint, StateIntegerThatIsNotOneOfItsTypeIsRefusedNamingTheKey) {
  using nlohmann::json;
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  const auto dir = write_run_checkpoint(run.path(), c, example(c, 1));
  const std::vector<std::byte> bytes = read_whole_file(dir / kTrainerStateFileName);
  const json good = json::parse(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  struct Case {
    const char* pointer;
    const char* key;  // as the message names it, with the value
    json value;
  };
  std::vector<Case> cases;
  for (const auto& [pointer, key] :
       {std::pair{"/step", "step"}, std::pair{"/data_cursor/epoch", "data_cursor.epoch"},
        std::pair{"/data_cursor/position", "data_cursor.position"}, std::pair{"/tokens_seen", "tokens_seen"},
        std::pair{"/world_size", "world_size"}, std::pair{"/seed", "seed"}}) {
    for (const json& value : {json(1.5), json(1e300), json(-1e300), json("1")}) cases.push_back({pointer, key, value});
  }
  cases.push_back({"/step", "step", json(std::uint64_t(1) << 63)});
  cases.push_back({"/data_cursor/position", "data_cursor.position", json(std::uint64_t(1) << 63)});
  cases.push_back({"/world_size", "world_size", json(std::int64_t(1) << 40)});
  cases.push_back({"/seed", "seed", json(-1)});
  for (const Case& k : cases) {
    json state = good;
    state[json::json_pointer(k.pointer)] = k.value;
    write_whole_file(dir / kTrainerStateFileName, state.dump(2));
    const std::string message = input_error_message([&] { read_run_checkpoint(dir, c); });
    EXPECT_THAT(message, HasSubstr((dir / kTrainerStateFileName).string())) << k.pointer << " = " << k.value;
    EXPECT_THAT(message, HasSubstr(k.key)) << k.pointer << " = " << k.value;
    EXPECT_THAT(message, HasSubstr(k.value.dump())) << k.pointer << " = " << k.value;
  }
}

TEST(RunCheckpoint, ConfigOfOtherShapesIsRefusedNamingTheTensor) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  const auto dir = write_run_checkpoint(run.path(), c, example(c, 1));
  DrafterConfig wider = c;
  wider.intermediate_size = 48;
  EXPECT_THAT(input_error_message([&] { read_run_checkpoint(dir, wider); }),
              HasSubstr("layers.0.mlp.gate_proj.weight"));
}

class KilledWhileWriting : public ::testing::TestWithParam<CheckpointPhase> {};

// The child writes step 2 over a run whose latest is step 1 and is killed (SIGKILL: no cleanup
// runs) at the phase; the parent then finds latest and what it names intact, and a later write
// of step 2 succeeds.
TEST_P(KilledWhileWriting, LatestAndThePreviousCheckpointSurvive) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  const RunCheckpoint first = example(c, 1), second = example(c, 2);
  write_run_checkpoint(run.path(), c, first);
  const CheckpointPhase kill_at = GetParam();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    CheckpointWriteOptions o;
    o.observer = [kill_at](CheckpointPhase phase) {
      if (phase == kill_at) ::raise(SIGKILL);
    };
    write_run_checkpoint(run.path(), c, second, o);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  const auto latest = latest_checkpoint(run.path());
  ASSERT_TRUE(latest.has_value());
  if (kill_at == CheckpointPhase::latest_written) {
    EXPECT_EQ(*latest, run / "step-00000002");  // the write had finished
    expect_equal(read_run_checkpoint(*latest, c), second);
  } else {
    EXPECT_EQ(*latest, run / "step-00000001");
    expect_equal(read_run_checkpoint(*latest, c), first);
  }
  expect_equal(read_run_checkpoint(run / "step-00000001", c), first);
  write_run_checkpoint(run.path(), c, second);
  expect_equal(read_run_checkpoint(*latest_checkpoint(run.path()), c), second);
  EXPECT_FALSE(std::filesystem::exists(run / "step-00000002.tmp"));
}

INSTANTIATE_TEST_SUITE_P(EveryPhase, KilledWhileWriting,
                         ::testing::Values(CheckpointPhase::temporary_directory_made, CheckpointPhase::model_written,
                                           CheckpointPhase::optimizer_written, CheckpointPhase::state_written,
                                           CheckpointPhase::renamed, CheckpointPhase::latest_written));

}  // namespace
}  // namespace dflash
