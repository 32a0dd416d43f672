// Run checkpoints (TRAINING §15): exact round trip, `latest`, --keep, refusal of a damaged or
// missing file naming it, and a write killed at every phase leaving `latest` and the checkpoint
// it names intact.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "distributed/checkpoint/save_restore.hpp"
#include "harness/file_fault_injector.hpp"
#include "io/errors.hpp"
#include "io/file_limits.hpp"
#include "io/sha256.hpp"
#include "reference/drafter_parameters.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using ::testing::HasSubstr;

std::vector<std::byte> read_whole_file_of(std::string_view text) {
  std::vector<std::byte> bytes;
  for (char ch : text) bytes.push_back(std::byte(static_cast<unsigned char>(ch)));
  return bytes;
}

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

// The reader under every checkpoint read: any range of each vector is those values of the whole
// (exp_avg and exp_avg_sq each from its own tensors), and a range past P is a caller's bug.
TEST(RunCheckpoint, TheReaderReadsAnyRangeOfEachVector) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  const RunCheckpoint ck = example(c, 6);
  const auto dir = write_run_checkpoint(run.path(), c, ck);
  const RunCheckpointReader reader = RunCheckpointReader::open(dir, c);
  EXPECT_EQ(reader.state().step, 6);
  EXPECT_TRUE(reader.state().master.empty());
  const auto P = std::int64_t(ck.master.size());
  for (const OptimizerPart part : kOptimizerParts) {
    const std::vector<double>& whole = ck.flat(part);
    for (const auto& [first, n] :
         std::vector<std::pair<std::int64_t, std::int64_t>>{{0, P}, {7, 300}, {P - 5, 5}, {P, 0}}) {
      std::vector<double> got(std::size_t(n), -1.0);
      reader.read(part, first, got);
      EXPECT_EQ(got, std::vector<double>(whole.begin() + first, whole.begin() + first + n)) << first << " +" << n;
    }
    std::vector<double> past(2);
    EXPECT_THROW(reader.read(part, P - 1, past), std::logic_error);
  }
}

// A checkpoint written from values (write_run_checkpoint_from, what the trainer's save does)
// asks for each part once, in kOptimizerParts' order, with the model file written before the
// moments are asked for (so master's values are gone by then); from fp32 values it writes the same
// bytes as from their doubles. A checkpoint that also carries vectors is refused.
TEST(RunCheckpoint, WrittenFromValuesAsksEachPartOnceInOrderAndWritesTheSameBytes) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  RunCheckpoint ck = example(c, 4);
  for (auto* v : {&ck.master, &ck.exp_avg, &ck.exp_avg_sq}) {
    for (double& x : *v) x = double(float(x));
  }
  CheckpointWriteOptions options{safetensors::Dtype::F32, 0, {}};
  const auto whole = write_run_checkpoint(run / "doubles", c, ck, options);

  RunCheckpoint counters = ck;
  counters.master = counters.exp_avg = counters.exp_avg_sq = {};
  std::vector<std::string> events;
  options.observer = [&](CheckpointPhase phase) {
    if (phase == CheckpointPhase::model_written) events.push_back("model written");
    if (phase == CheckpointPhase::optimizer_written) events.push_back("optimizer written");
  };
  const auto values = [&](OptimizerPart part) -> FlatValues {
    const std::vector<double>& v = ck.flat(part);
    events.push_back(part == OptimizerPart::master    ? "master"
                     : part == OptimizerPart::exp_avg ? "exp_avg"
                                                      : "exp_avg_sq");
    return std::vector<float>(v.begin(), v.end());
  };
  const auto streamed = write_run_checkpoint_from(run / "floats", c, counters, values, options);
  EXPECT_EQ(events,
            (std::vector<std::string>{"master", "model written", "exp_avg", "exp_avg_sq", "optimizer written"}));
  for (const char* file : {kModelFileName, kOptimizerFileName, kTrainerStateFileName}) {
    EXPECT_EQ(read_whole_file(streamed / file), read_whole_file(whole / file)) << file;
  }
  expect_equal(read_run_checkpoint(streamed, c), ck);
  EXPECT_THROW(write_run_checkpoint_from(run / "both", c, ck, values), std::logic_error);
}

// checkpoint_bytes, what the disk gate counts, is the two files a checkpoint writes to the byte,
// in either precision, and the state's read limit, which the state it writes is well under.
TEST(RunCheckpoint, CheckpointBytesAreItsFilesAndTheStatesLimit) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  for (const safetensors::Dtype precision : {safetensors::Dtype::F32, safetensors::Dtype::F64}) {
    SCOPED_TRACE(safetensors::dtype_name(precision));
    RunCheckpoint ck = example(c, precision == safetensors::Dtype::F32 ? 3 : 4);
    const auto dir = write_run_checkpoint(run.path(), c, ck, CheckpointWriteOptions{precision, 0, {}});
    const std::uint64_t files =
        std::filesystem::file_size(dir / kModelFileName) + std::filesystem::file_size(dir / kOptimizerFileName);
    EXPECT_EQ(checkpoint_bytes(c, precision), files + kMaxTrainerStateFileBytes);
    EXPECT_LT(std::filesystem::file_size(dir / kTrainerStateFileName), kMaxTrainerStateFileBytes / 100);
    EXPECT_EQ(checkpoint_step(dir), ck.step);
  }
  EXPECT_THROW(checkpoint_step(run / "step-12"), InputError);
}

// A rank that resumes on a device backend reads its own part alone: every slice (inside one
// tensor, across tensor boundaries, past P, empty, the whole) holds exactly the full read's values
// there, from both precisions' files, and records where it starts.
TEST(RunCheckpoint, ASliceReadsExactlyThoseValuesOfTheWholeVectors) {
  const DrafterConfig c = tiny_config();
  const std::int64_t P = drafter_parameter_count(c);
  for (const safetensors::Dtype precision : {safetensors::Dtype::F64, safetensors::Dtype::F32}) {
    SCOPED_TRACE(std::string(safetensors::dtype_name(precision)));
    ScratchDirectory run;
    const auto dir = write_run_checkpoint(run.path(), c, example(c, 3), {precision, 0, {}});
    const RunCheckpoint whole = read_run_checkpoint(dir, c);
    ASSERT_EQ(std::int64_t(whole.master.size()), P);
    EXPECT_EQ(whole.first, 0);
    const std::int64_t first_tensor = shape_numel(drafter_parameter_shapes(c).front().shape);
    for (const FlatSlice slice : {FlatSlice{1, 3}, FlatSlice{first_tensor - 2, 5}, FlatSlice{P / 3, P / 3},
                                  FlatSlice{P - 4, 100}, FlatSlice{P, 8}, FlatSlice{0, -1}, FlatSlice{7, -1}}) {
      SCOPED_TRACE("slice from " + std::to_string(slice.first) + ", " + std::to_string(slice.count));
      const RunCheckpoint part = read_run_checkpoint(dir, c, slice);
      const std::int64_t end = slice.count < 0 ? P : std::min(P, slice.first + slice.count);
      EXPECT_EQ(part.first, slice.first);
      EXPECT_EQ(part.step, whole.step);
      EXPECT_EQ(part.data_cursor, whole.data_cursor);
      for (const auto& [got, want] : {std::pair{&part.master, &whole.master}, std::pair{&part.exp_avg, &whole.exp_avg},
                                      std::pair{&part.exp_avg_sq, &whole.exp_avg_sq}}) {
        EXPECT_EQ(*got, std::vector<double>(want->begin() + slice.first, want->begin() + end));
      }
    }
    // A ZeRO-1 shard wholly in the padding (it starts past P): nothing, from P.
    const RunCheckpoint padding = read_run_checkpoint(dir, c, FlatSlice{P + 10, 5});
    EXPECT_EQ(padding.first, P);
    EXPECT_TRUE(padding.master.empty() && padding.exp_avg.empty() && padding.exp_avg_sq.empty());
    EXPECT_THROW(read_run_checkpoint(dir, c, FlatSlice{-1, 5}), std::logic_error);
    EXPECT_THROW(read_run_checkpoint(dir, c, FlatSlice{0, -2}), std::logic_error);
  }
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

// A run resumed from an older checkpoint than the newest directory (killed between a save's rename
// and its `latest` update, then resumed from the one before) saves a step below that directory's:
// keeping the K newest must not delete the checkpoint just written, which `latest` now names.
TEST(RunCheckpoint, KeepNeverRemovesTheCheckpointJustWritten) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  for (std::int64_t step : {10, 20}) write_run_checkpoint(run.path(), c, example(c, step));
  write_run_checkpoint(run.path(), c, example(c, 11), {safetensors::Dtype::F64, 1, {}});
  EXPECT_EQ(latest_checkpoint(run.path()), run / "step-00000011");
  EXPECT_EQ(read_run_checkpoint(run / "step-00000011", c).step, 11);
  EXPECT_FALSE(std::filesystem::exists(run / "step-00000010"));
}

// Only step-NNNNNNNN directories are checkpoints: a save killed before its rename leaves
// step-NNNNNNNN.tmp, and a user may keep a copy as step-NNNNNNNN.bak; neither is listed, and --keep
// deletes neither.
TEST(RunCheckpoint, OnlyStepDirectoriesAreCheckpointsNotTemporariesOrCopies) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  std::filesystem::create_directories(run / "step-00000005.tmp");
  std::filesystem::create_directories(run / "step-00000003.bak");
  std::filesystem::create_directories(run / "old-step-00000001");
  for (std::int64_t step : {2, 4})
    write_run_checkpoint(run.path(), c, example(c, step), {safetensors::Dtype::F64, 1, {}});
  EXPECT_EQ(run_checkpoints(run.path()), (std::vector<std::filesystem::path>{run / "step-00000004"}));
  EXPECT_TRUE(std::filesystem::exists(run / "step-00000005.tmp"));
  EXPECT_TRUE(std::filesystem::exists(run / "step-00000003.bak"));
  EXPECT_TRUE(std::filesystem::exists(run / "old-step-00000001"));
}

// A tensor of the right size in another shape (a transposed matrix) is refused, naming both
// shapes: read in file order, its elements would land in the wrong places.
TEST(RunCheckpoint, TensorOfAnotherShapeIsRefusedNamingBothShapes) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  const auto dir = write_run_checkpoint(run.path(), c, example(c, 1));
  const safetensors::Reader original = safetensors::Reader::open_file(dir / kModelFileName);
  safetensors::Writer w;
  for (const auto& [key, value] : original.metadata()) w.set_metadata(key, value);
  std::string transposed;
  safetensors::Shape config_shape;
  for (const std::string& name : original.names()) {
    safetensors::Shape shape = original.info(name).shape;
    if (transposed.empty() && shape.size() == 2 && shape[0] != shape[1]) {
      config_shape = shape;
      std::swap(shape[0], shape[1]);
      transposed = name;
    }
    w.add_floats(name, original.info(name).dtype, shape, original.doubles(name));
  }
  ASSERT_FALSE(transposed.empty());
  w.write_file(dir / kModelFileName);
  // The hash recorded for it is brought up to date: only the shape is wrong.
  nlohmann::json state = nlohmann::json::parse(file_text(dir / kTrainerStateFileName));
  state["sha256"][kModelFileName] = sha256_file_hex(dir / kModelFileName);
  write_whole_file(dir / kTrainerStateFileName, state.dump(2));
  const std::string message = input_error_message([&] { read_run_checkpoint(dir, c); });
  EXPECT_THAT(message, HasSubstr("'" + transposed + "'"));
  EXPECT_THAT(message, HasSubstr("shape " + safetensors::format_shape({config_shape[1], config_shape[0]}) +
                                 " is not the config's " + safetensors::format_shape(config_shape)));
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

// A rank whose checkpoint another rank verifies reads its slice without reading the files whole
// for their hashes: a byte altered outside the slice goes unseen there, and the verifying read
// refuses it. Every other check still holds: a missing file is refused either way.
TEST(RunCheckpoint, ARankThatLeavesTheHashesToAnotherReadsOnlyItsSlice) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  const RunCheckpoint ck = example(c, 7);
  const auto dir = write_run_checkpoint(run.path(), c, ck);
  {  // the last byte of the model file: the last element of the last tensor in data order
    std::fstream f(dir / kModelFileName, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put(char(0x3f));
  }
  const FlatSlice slice{0, 10};
  const RunCheckpoint part = read_run_checkpoint(dir, c, slice, CheckpointHashes::verified_by_another_rank);
  EXPECT_EQ(part.master, std::vector<double>(ck.master.begin(), ck.master.begin() + 10));
  EXPECT_EQ(part.step, ck.step);
  EXPECT_THAT(input_error_message([&] { read_run_checkpoint(dir, c, slice); }),
              HasSubstr((dir / kModelFileName).string()));
  std::filesystem::remove(dir / kOptimizerFileName);
  EXPECT_THAT(
      input_error_message([&] { read_run_checkpoint(dir, c, slice, CheckpointHashes::verified_by_another_rank); }),
      HasSubstr("is missing"));
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

// Class 3 of issue 22: a checkpoint file that is a link to /dev/zero hung the hash read; a FIFO
// hung the open. Each is refused, naming the file and what it is, by resume and by export.
TEST(RunCheckpoint, FileThatIsNotARegularFileIsRefusedNamingIt) {
  const DrafterConfig c = tiny_config();
  for (const char* file : {kModelFileName, kOptimizerFileName, kTrainerStateFileName}) {
    for (const bool fifo : {false, true}) {
      ScratchDirectory run;
      const auto dir = write_run_checkpoint(run.path(), c, example(c, 1));
      std::filesystem::remove(dir / file);
      if (fifo) {
        ASSERT_EQ(::mkfifo((dir / file).c_str(), 0644), 0);
      } else {
        std::filesystem::create_symlink("/dev/zero", dir / file);
      }
      const std::string kind = fifo ? "is a FIFO, not a regular file" : "is a character device, not a regular file";
      EXPECT_THAT(input_error_message([&] { read_run_checkpoint(dir, c); }),
                  HasSubstr((dir / file).string() + ": " + kind))
          << file;
      if (std::string_view(file) == kTrainerStateFileName) {
        EXPECT_THAT(input_error_message([&] { checkpoint_config_json(dir); }), HasSubstr(kind));
      }
    }
  }
}

// Class 3 of issue 22: `latest` linked to /dev/zero was read for 4.3 GB, then bad_alloc.
TEST(RunCheckpoint, LatestThatIsNotASmallRegularFileIsRefusedNamingIt) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  write_run_checkpoint(run.path(), c, example(c, 1));
  const auto latest = run / kLatestFileName;
  std::filesystem::remove(latest);
  std::filesystem::create_symlink("/dev/zero", latest);
  EXPECT_THAT(input_error_message([&] { latest_checkpoint(run.path()); }),
              HasSubstr(latest.string() + ": is a character device, not a regular file"));
  std::filesystem::remove(latest);
  ASSERT_EQ(::mkfifo(latest.c_str(), 0644), 0);
  EXPECT_THAT(input_error_message([&] { latest_checkpoint(run.path()); }), HasSubstr("is a FIFO, not a regular file"));
  std::filesystem::remove(latest);
  write_whole_file(latest, "step-00000001\n" + std::string(std::size_t(1) << 20, '\n'));  // 1 MiB
  EXPECT_THAT(input_error_message([&] { latest_checkpoint(run.path()); }), HasSubstr("-byte limit for this file"));
}

// Class 8 of issue 22: a link planted at latest's temporary name (latest.tmp) pointing outside the
// run: the target was overwritten and `latest` became a link out of the run dir.
TEST(RunCheckpoint, LinksPlantedAtTemporaryNamesAreNeverFollowed) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run, outside;
  write_run_checkpoint(run.path(), c, example(c, 1));
  write_whole_file(outside / "victim", "precious\n");
  std::filesystem::create_directory(outside / "victim-dir");
  write_whole_file(outside / "victim-dir" / "keep", "precious\n");
  std::filesystem::create_symlink(outside / "victim", run / "latest.tmp");
  std::filesystem::create_symlink(outside / "victim-dir", run / "step-00000002.tmp");
  write_run_checkpoint(run.path(), c, example(c, 2));
  EXPECT_EQ(read_whole_file(outside / "victim"), read_whole_file_of("precious\n"));
  EXPECT_EQ(read_whole_file(outside / "victim-dir" / "keep"), read_whole_file_of("precious\n"));
  EXPECT_FALSE(std::filesystem::is_symlink(run / kLatestFileName));
  EXPECT_FALSE(std::filesystem::is_symlink(run / "step-00000002"));
  EXPECT_EQ(latest_checkpoint(run.path()), run / "step-00000002");
  expect_equal(read_run_checkpoint(run / "step-00000002", c), example(c, 2));
}

// Class 12 of issue 22: trainer_state.json's fields were taken as they came: a step other than its
// directory's, fractional or huge steps, world_size <= 0, unknown format or version, negative
// tokens_seen. Each is refused naming the file, the field and the value. Class 16: so is a key given
// twice (the last one used to win).
struct BadState {
  std::string name;
  std::function<void(std::string&)> edit;  // on the JSON text
  std::string named;
};

class StateRefused : public ::testing::TestWithParam<BadState> {};

TEST_P(StateRefused, NamingFileFieldAndValue) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory run;
  const auto dir = write_run_checkpoint(run.path(), c, example(c, 10));
  const auto path = dir / kTrainerStateFileName;
  std::vector<std::byte> bytes = read_whole_file(path);
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  GetParam().edit(text);
  write_whole_file(path, text);
  const std::string message = input_error_message([&] { read_run_checkpoint(dir, c); });
  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_THAT(message, HasSubstr(GetParam().named));
}

// Replaces the value of top-level `key` in trainer_state.json's text.
std::function<void(std::string&)> set(const std::string& key, const std::string& value) {
  return [key, value](std::string& text) {
    nlohmann::json j = nlohmann::json::parse(text);
    j[key] = nlohmann::json::parse(value);
    text = j.dump(2);
  };
}

INSTANTIATE_TEST_SUITE_P(
    EveryField, StateRefused,
    ::testing::Values(
        BadState{"step_of_another_directory", set("step", "11"),
                 "step: 11 is not the step of its directory step-00000010"},
        BadState{"fractional_step", set("step", "10.5"), "step: 10.5 is not an integer"},
        BadState{"huge_step", set("step", "4611686018427387904"),
                 "step: 4611686018427387904 is not an integer in [0, 99999999]"},
        BadState{"negative_step", set("step", "-3"), "step: -3"},
        BadState{"world_size_0", set("world_size", "0"), "world_size: 0 is not an integer in [1, "},
        BadState{"world_size_negative", set("world_size", "-2"), "world_size: -2"},
        BadState{"world_size_past_int", set("world_size", "4294967297"), "world_size: 4294967297"},
        BadState{"other_format", set("format", "\"other\""), "format: \"other\" is not \"dflash-checkpoint\""},
        BadState{"other_version", set("version", "99"), "version: 99 is not 1"},
        BadState{"negative_tokens_seen", set("tokens_seen", "-5"), "tokens_seen: -5"},
        BadState{"negative_epoch", set("data_cursor", R"({"epoch": -1, "position": 0})"), "data_cursor.epoch: -1"},
        BadState{"string_seed", set("seed", "\"5\""), "seed: \"5\""},
        BadState{"duplicate_step", [](std::string& text) { text.insert(text.find('{') + 1, "\"step\": 3,"); },
                 "duplicate key 'step'"}),
    [](const auto& info) { return info.param.name; });

// Fault injection (issue 22): each create, write, flush to disk, rename and directory creation of a
// save fails in turn (io/file_faults.hpp's fault point), with ENOSPC and with EIO. The save reports
// the file and the system's reason; `latest` and the checkpoint it names stay intact (hashes
// verified), the previous checkpoint too; the save then succeeds once the disk does.
TEST(RunCheckpoint, EveryFailedWriteOfASaveLeavesLatestAndThePreviousCheckpointIntact) {
  const DrafterConfig c = tiny_config();
  const RunCheckpoint first = example(c, 1), second = example(c, 2);
  ScratchDirectory base;
  write_run_checkpoint(base / "run", c, first);
  std::int64_t operations = 0;
  {
    ScratchDirectory run;
    std::filesystem::copy(base / "run", run / "run", std::filesystem::copy_options::recursive);
    const testing::FileFaultInjector count(-1, 0);
    write_run_checkpoint(run / "run", c, second);
    operations = count.operations_seen();
  }
  // The directory made; create, write, flush, rename, flush of the directory for each of the three
  // files; the rename of the directory, its flush; the same five for `latest`.
  ASSERT_EQ(operations, 1 + 3 * 5 + 2 + 5);
  for (const int error_number : {ENOSPC, EIO}) {
    for (std::int64_t k = 0; k < operations; ++k) {
      ScratchDirectory scratch;
      const auto run = scratch / "run";
      std::filesystem::copy(base / "run", run, std::filesystem::copy_options::recursive);
      std::string failed, message;
      {
        const testing::FileFaultInjector fault(k, error_number);
        try {
          write_run_checkpoint(run, c, second);
        } catch (const std::runtime_error& e) {
          message = e.what();
        }
        failed = fault.failed();
      }
      EXPECT_THAT(message, HasSubstr(std::strerror(error_number))) << failed;
      EXPECT_THAT(message, HasSubstr(run.string())) << failed;
      const auto latest = latest_checkpoint(run);
      ASSERT_TRUE(latest.has_value()) << failed;
      // Only the flush of the directory after latest's rename comes after latest names step 2.
      expect_equal(read_run_checkpoint(*latest, c), *latest == run / "step-00000002" ? second : first);
      expect_equal(read_run_checkpoint(run / "step-00000001", c), first);
      write_run_checkpoint(run, c, second);
      expect_equal(read_run_checkpoint(*latest_checkpoint(run), c), second);
    }
  }
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
