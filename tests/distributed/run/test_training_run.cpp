// `dflash train` in process on one rank (the single-process communicator): the loss falls on the
// learnable synthetic set; a SIGTERM mid-run saves and exits 0, and the resumed run ends bitwise
// equal to the uninterrupted one; every bad input is refused, naming it, with nothing written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <sstream>

#include "distributed/metrics/svg_report.hpp"
#include "distributed/run/cuda_step_backend.hpp"
#include "distributed/run/trainer.hpp"
#include "distributed/single_process_communicator.hpp"
#include "distributed/weights/drafter_export.hpp"
#include "distributed/weights/drafter_init.hpp"
#include "tests/distributed/malformed_shards.hpp"
#include "tests/distributed/run_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using ::testing::AnyOf;
using ::testing::HasSubstr;

TrainingRunOptions options_for(const std::filesystem::path& out) {
  TrainingRunOptions o;
  o.config = tiny_train_config_path();
  o.data = synthetic_run_data() / "features";
  o.target = synthetic_run_data() / "target";
  o.out = out;
  return o;
}

int train(const TrainingRunOptions& o, std::string* log = nullptr) {
  SingleProcessCommunicator comm;
  std::ostringstream out;
  const int code = run_training(o, comm, out);
  if (log) *log = out.str();
  return code;
}

std::string file_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The uninterrupted 20-step run, made once.
const std::filesystem::path& uninterrupted_run() {
  static const ScratchDirectory dir;
  static const std::filesystem::path out = [] {
    TrainingRunOptions o = options_for(dir / "run");
    o.save_every = 10;
    EXPECT_EQ(train(o), 0);
    return dir / "run";
  }();
  return out;
}

TEST(TrainingRun, LossFallsOnTheLearnableSetAndTheRunIsRecorded) {
  const std::filesystem::path& run = uninterrupted_run();
  const std::vector<StepRecord> records = read_metrics_file(run / "metrics.jsonl");
  ASSERT_EQ(records.size(), 20u);
  const double first = (records[0].loss + records[1].loss + records[2].loss) / 3;
  const double last = (records[17].loss + records[18].loss + records[19].loss) / 3;
  EXPECT_LT(last, 0.85 * first) << "loss " << first << " -> " << last;
  std::int64_t tokens = 0, truncated = 0;
  for (const StepRecord& r : records) {
    tokens += r.tokens;
    truncated += r.truncated_sequences;
    EXPECT_EQ(r.accuracy_by_position.size(), 3u);  // B - 1
    EXPECT_GE(r.acceptance_length, 1.0);
    EXPECT_GT(r.peak_bytes.at("parameters"), 0);
  }
  EXPECT_GT(truncated, 0);  // lengths 16..32 against max_context 24
  EXPECT_EQ(latest_checkpoint(run), run / "step-00000020");
  const RunCheckpoint ck = read_run_checkpoint(run / "step-00000020", tiny_config());
  EXPECT_EQ(ck.step, 20);
  EXPECT_EQ(ck.tokens_seen, tokens);
  EXPECT_EQ(ck.data_cursor, (DataCursor{5, 0}));  // 20 steps x 6 sequences = 5 epochs of 24
  EXPECT_EQ(ck.world_size, 1);
  // The target's depth, from its config.json (data synth: 4), is recorded for the export.
  EXPECT_EQ(ck.config.at("num_target_layers"), 4);
  EXPECT_TRUE(std::filesystem::exists(run / "step-00000010"));
}

TEST(TrainingRun, SigtermMidRunSavesAndTheResumedRunIsBitwiseTheUninterruptedOne) {
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.after_step = [](std::int64_t t) {
    if (t == 6) std::raise(SIGTERM);  // the handler only records it: step 6 completes, then the save
  };
  std::string log;
  ASSERT_EQ(train(o, &log), 0);
  EXPECT_THAT(log, HasSubstr("stopped by signal"));
  EXPECT_EQ(latest_checkpoint(dir / "run"), dir / "run" / "step-00000007");
  EXPECT_EQ(read_metrics_file(dir / "run" / "metrics.jsonl").size(), 7u);

  o.after_step = nullptr;
  o.resume = true;
  ASSERT_EQ(train(o, &log), 0);
  EXPECT_THAT(log, HasSubstr("resuming from"));
  const std::filesystem::path& whole = uninterrupted_run();
  for (const char* file : {kModelFileName, kOptimizerFileName, kTrainerStateFileName}) {
    EXPECT_EQ(file_text(dir / "run" / "step-00000020" / file), file_text(whole / "step-00000020" / file)) << file;
  }
  // Same learning rate, loss and moments step by step after the resume (no re-warm-up).
  const std::vector<StepRecord> a = read_metrics_file(dir / "run" / "metrics.jsonl"),
                                b = read_metrics_file(whole / "metrics.jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t t = 0; t < a.size(); ++t) {
    EXPECT_EQ(a[t].lr, b[t].lr) << t;
    EXPECT_EQ(a[t].loss, b[t].loss) << t;
  }
  // Resuming a finished run does nothing.
  ASSERT_EQ(train(o, &log), 0);
  EXPECT_THAT(log, HasSubstr("already at total_steps"));
}

TEST(TrainingRun, InitFromAnExportedDrafterStartsFromItsWeights) {
  ScratchDirectory dir;
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  export_drafter(dir / "released", c, seeded_drafter_parameters(tracker, c, 77));
  TrainingRunOptions o = options_for(dir / "run");
  o.init = dir / "released";
  ASSERT_EQ(train(o), 0);
  // Different start, different run than the seeded one.
  EXPECT_NE(read_run_checkpoint(dir / "run" / "step-00000020", c).master,
            read_run_checkpoint(uninterrupted_run() / "step-00000020", c).master);
}

TEST(TrainingRun, HeldOutEvaluationEveryNStepsGoesToEvalJsonl) {
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.eval_data = synthetic_run_data() / "features";
  o.eval_every = 5;
  ASSERT_EQ(train(o), 0);
  std::ifstream in(dir / "run" / "eval.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 4u);
  for (std::size_t k = 0; k < records.size(); ++k) {
    EXPECT_EQ(records[k].at("step"), std::int64_t(5 * k + 4));
    EXPECT_EQ(records[k].at("sequences"), 24);  // the whole held-out set
    EXPECT_EQ(records[k].at("accuracy_by_position").size(), 3u);
  }
  EXPECT_LT(records.back().at("loss").get<double>(), records.front().at("loss").get<double>());
  // Training is not affected by evaluating: the same final weights as the run without it.
  EXPECT_EQ(file_text(dir / "run" / "step-00000020" / kModelFileName),
            file_text(uninterrupted_run() / "step-00000020" / kModelFileName));
  o.eval_data.reset();
  EXPECT_THAT(input_error_message([&] { train(o); }), HasSubstr("--eval-data"));
}

// ---- bad input: refused, naming it, before anything is written ----

void expect_refused_writing_nothing(const TrainingRunOptions& o, const std::vector<std::string>& named) {
  const std::string message = input_error_message([&] { train(o); });
  for (const std::string& s : named) EXPECT_THAT(message, HasSubstr(s));
  EXPECT_FALSE(std::filesystem::exists(o.out)) << "the refused run wrote " << o.out;
}

class RunWithMalformedShard : public ::testing::TestWithParam<MalformedShardCase> {};

TEST_P(RunWithMalformedShard, IsRefusedBeforeAnythingIsWritten) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  std::filesystem::create_directories(dir / "data");
  write_feature_shard(dir / "data" / "a.safetensors", valid_shard(c, 6, 1), safetensors::Dtype::BF16);
  RawShard raw(valid_shard(c, 4, 9));
  GetParam().damage(raw);
  raw.write(dir / "data" / "b.safetensors");
  TrainingRunOptions o = options_for(dir / "run");
  o.data = dir / "data";
  std::vector<std::string> named = GetParam().named;
  named.push_back((dir / "data" / "b.safetensors").string());
  expect_refused_writing_nothing(o, named);
}

INSTANTIATE_TEST_SUITE_P(EveryCase, RunWithMalformedShard, ::testing::ValuesIn(malformed_shard_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(RunBadInput, TargetWithoutTheNamedTensors) {
  ScratchDirectory dir;
  std::filesystem::create_directories(dir / "target");
  safetensors::Writer w;
  w.add_floats("model.embed_tokens.weight", safetensors::Dtype::BF16, {64, 16}, std::vector<double>(64 * 16, 0.5));
  w.write_file(dir / "target" / "model.safetensors");
  write_whole_file(dir / "target" / "config.json", R"({"num_hidden_layers": 4})");
  TrainingRunOptions o = options_for(dir / "run");
  o.target = dir / "target";
  expect_refused_writing_nothing(o, {"'lm_head.weight' is missing", (dir / "target").string()});
}

TEST(RunBadInput, TargetWithAnotherVocabOrHiddenSize) {
  for (const safetensors::Shape& shape : {safetensors::Shape{100, 16}, safetensors::Shape{64, 32}}) {
    ScratchDirectory dir;
    std::filesystem::create_directories(dir / "target");
    safetensors::Writer w;
    const std::vector<double> v(std::size_t(shape[0] * shape[1]), 0.5);
    w.add_floats("model.embed_tokens.weight", safetensors::Dtype::BF16, shape, v);
    w.add_floats("lm_head.weight", safetensors::Dtype::BF16, shape, v);
    w.write_file(dir / "target" / "model.safetensors");
    write_whole_file(dir / "target" / "config.json", R"({"num_hidden_layers": 4})");
    TrainingRunOptions o = options_for(dir / "run");
    o.target = dir / "target";
    expect_refused_writing_nothing(o, {"model.embed_tokens.weight", safetensors::format_shape(shape), "[64, 16]"});
  }
}

// A copy of the synthetic target whose config.json says it has `depth` layers.
std::filesystem::path target_of_depth(const std::filesystem::path& dir, std::int64_t depth) {
  std::filesystem::copy(synthetic_run_data() / "target", dir / "target", std::filesystem::copy_options::recursive);
  nlohmann::json j = nlohmann::json::parse(file_text(dir / "target" / "config.json"));
  j["num_hidden_layers"] = depth;
  std::filesystem::remove(dir / "target" / "config.json");
  write_whole_file(dir / "target" / "config.json", j.dump());
  return dir / "target";
}

TEST(RunBadInput, TargetLayerIdAtOrBeyondTheTargetsDepth) {
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.target = target_of_depth(dir.path(), 3);  // tiny's ids are [1, 3]: layer 3 does not exist
  expect_refused_writing_nothing(o, {"target_layer_ids[1]", "3 is not below num_target_layers = 3"});
}

TEST(RunBadInput, InitWhoseDepthIsNotTheTargets) {
  ScratchDirectory dir;
  DrafterConfig c = tiny_export_config();
  c.num_target_layers = 5;
  MemoryTracker tracker;
  export_drafter(dir / "released", c, seeded_drafter_parameters(tracker, c, 1));
  TrainingRunOptions o = options_for(dir / "run");
  o.init = dir / "released";
  expect_refused_writing_nothing(o, {"num_target_layers", "is 4", "is 5", (dir / "released").string()});
}

TEST(RunBadInput, TargetWithoutItsDepthAndNoneGiven) {
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.target = target_of_depth(dir.path(), 4);
  std::filesystem::remove(dir / "target" / "config.json");
  expect_refused_writing_nothing(o, {"the target's layer count is unknown", (dir / "target").string()});
}

TEST(RunBadInput, InitWithARefusedConfigKey) {
  const DrafterConfig c = tiny_export_config();
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"rope_scaling", {{"rope_type", "yarn"}}},
                                                           {"attention_bias", true},
                                                           {"hidden_act", "gelu"},
                                                           {"is_causal", true},
                                                           {"use_sliding_window", false},
                                                           {"loss_decay_gamma", -1.0},
                                                           {"hidden_size", 32}}) {
    ScratchDirectory dir;
    MemoryTracker tracker;
    export_drafter(dir / "released", c, seeded_drafter_parameters(tracker, c, 1));
    nlohmann::json j = nlohmann::json::parse(file_text(dir / "released" / "config.json"));
    j[key] = value;
    write_whole_file(dir / "released" / "config.json", j.dump());
    TrainingRunOptions o = options_for(dir / "run");
    o.init = dir / "released";
    expect_refused_writing_nothing(o, {key});
  }
}

TEST(RunBadInput, ConfigThatDoesNotFitThePlan) {
  ScratchDirectory dir;
  nlohmann::json j =
      nlohmann::json::parse(file_text(std::filesystem::path(DFLASH_SOURCE_DIR) / "configs" / "qwen3.6-27b.json"));
  j.update({{"total_steps", 10}, {"global_batch_sequences", 8}, {"max_context", 4096}});
  write_whole_file(dir / "big.json", j.dump());
  TrainingRunOptions o = options_for(dir / "run");
  o.config = dir / "big.json";
  o.data = dir / "nowhere";    // never reached: the gate comes first
  o.target = dir / "nowhere";  // no config.json: the depth is big.json's 64
  expect_refused_writing_nothing(o, {"does not fit", "--force"});
}

TEST(RunBadInput, OutputHoldingAnotherRunWithoutResume) {
  ScratchDirectory dir;
  std::filesystem::create_directories(dir / "run" / "step-00000003");
  write_whole_file(dir / "run" / "latest", "step-00000003\n");
  const std::vector<std::string> before = directory_listing(dir / "run");
  const std::string message = input_error_message([&] { train(options_for(dir / "run")); });
  EXPECT_THAT(message, HasSubstr("already holds another run's checkpoints (latest: step-00000003)"));
  EXPECT_THAT(message, HasSubstr("--resume"));
  EXPECT_EQ(directory_listing(dir / "run"), before);
}

TEST(RunBadInput, ResumeWithAnotherConfigNamesTheField) {
  ScratchDirectory dir;
  std::filesystem::copy(uninterrupted_run(), dir / "run", std::filesystem::copy_options::recursive);
  nlohmann::json j = nlohmann::json::parse(file_text(tiny_train_config_path()));
  j["learning_rate"] = 0.02;
  write_whole_file(dir / "other.json", j.dump());
  TrainingRunOptions o = options_for(dir / "run");
  o.config = dir / "other.json";
  o.resume = true;
  const std::vector<std::string> before = directory_listing(dir / "run");
  EXPECT_THAT(input_error_message([&] { train(o); }), HasSubstr("learning_rate"));
  EXPECT_EQ(directory_listing(dir / "run"), before);
}

// Without a GPU (or without CUDA in the build), --backend cuda is refused after the plan gate,
// naming --backend and why, before anything is written. Where a GPU is, ci/gpu runs the CUDA run.
TEST(RunBadInput, CudaBackendWithoutAGpuIsRefusedAfterThePlanGate) {
  std::string why;
  try {
    SingleProcessCommunicator one;
    require_cuda_training_available(one);
    GTEST_SKIP() << "a GPU is available here: the CUDA run is ci/gpu's (dflash train --backend cuda on mid)";
  } catch (const InputError& e) {
    why = e.what();
  }
  EXPECT_THAT(why, AnyOf(HasSubstr("no GPU is available"), HasSubstr("built without CUDA")));
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.backend = TrainingBackend::cuda;
  expect_refused_writing_nothing(o, {"--backend", why.substr(why.find("cuda:"))});
  std::ostringstream out;
  try {
    SingleProcessCommunicator comm;
    run_training(o, comm, out);
  } catch (const InputError&) {}
  EXPECT_THAT(out.str(), HasSubstr("backend cuda: fits")) << "the plan gate runs first";
}

}  // namespace
}  // namespace dflash
