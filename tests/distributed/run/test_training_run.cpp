// `dflash train` in process on one rank (the single-process communicator): the loss falls on the
// learnable synthetic set; a SIGTERM mid-run saves and exits 0, and the resumed run ends bitwise
// equal to the uninterrupted one; every bad input is refused, naming it, with nothing written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/philox.hpp"
#include "distributed/metrics/svg_report.hpp"
#include "distributed/run/cuda_step_backend.hpp"
#include "distributed/run/trainer.hpp"
#include "distributed/single_process_communicator.hpp"
#include "distributed/weights/drafter_export.hpp"
#include "distributed/weights/drafter_init.hpp"
#include "harness/file_fault_injector.hpp"
#include "tests/distributed/malformed_shards.hpp"
#include "tests/distributed/run_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using ::testing::AnyOf;
using ::testing::HasSubstr;

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

// The reference backend, keeping what each step is given: per step, each sequence's global index,
// tokens, loss mask and target features.
struct SeenSequence {
  std::int64_t g = 0;
  std::vector<std::int64_t> tokens;
  std::vector<std::uint8_t> loss_mask;
  std::vector<double> target_features;
};

class BatchRecordingBackend final : public StepBackend {
 public:
  BatchRecordingBackend(Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                        const FrozenWeightSource& frozen, TrainingState state,
                        std::vector<std::vector<SeenSequence>>& seen)
      : inner_(make_reference_step_backend(tracker_, comm, config, training, frozen, std::move(state))), seen_(seen) {}
  std::int64_t completed_steps() const override { return inner_->completed_steps(); }
  SequenceEvaluation forward_statistics(const DrafterConfig& config, const DrafterBatch<double>& batch,
                                        const DrafterStepOptions& options,
                                        const Bf16Features* bf16 = nullptr) override {
    return inner_->forward_statistics(config, batch, options, bf16);
  }
  bool reads_features_as_bf16() const override { return inner_->reads_features_as_bf16(); }
  StepMetrics step(std::span<const RankSequences> sequences, const TrainStepOptions& options) override {
    std::vector<SeenSequence>& step = seen_.emplace_back();
    for (const RankSequences& s : sequences) {
      step.push_back({s.first_global_index, s.batch->tokens.values(), s.batch->loss_mask.values(),
                      s.batch->target_features.values()});
    }
    return inner_->step(sequences, options);
  }
  FlatValues gather_optimizer(OptimizerPart part, bool to_this_rank) override {
    return inner_->gather_optimizer(part, to_this_rank);
  }
  safetensors::Dtype master_dtype() const override { return inner_->master_dtype(); }
  std::map<std::string, std::int64_t> peak_bytes() const override { return inner_->peak_bytes(); }
  void reset_peaks() override { inner_->reset_peaks(); }

 private:
  MemoryTracker tracker_;
  std::unique_ptr<StepBackend> inner_;
  std::vector<std::vector<SeenSequence>>& seen_;
};

// TRAINING §11 and §14 from the files themselves, not through FeatureDataset or DataOrder: the
// shards read raw in name order, epoch e's order by Philox key word 0 (ties by index), and global
// batch t the positions t B ... t B + B - 1 of the epochs laid end to end; each sequence cut to its
// first max_context rows. Every step must train on exactly those sequences, in that order.
TEST(TrainingRun, EveryStepTrainsOnTheSequencesTheDataOrderNamesAsTheShardsHoldThem) {
  ScratchDirectory dir;
  std::vector<std::vector<SeenSequence>> seen;
  TrainingRunOptions o = options_for(dir / "run");
  o.make_step_backend = [&seen](Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                                const FrozenWeightSource& frozen, TrainingState state) {
    return std::make_unique<BatchRecordingBackend>(comm, config, training, frozen, std::move(state), seen);
  };
  ASSERT_EQ(train(o), 0);

  std::vector<SeenSequence> set;  // every sequence of the set, whole
  std::vector<std::filesystem::path> shards;
  for (const auto& entry : std::filesystem::directory_iterator(o.data)) {
    if (entry.path().extension() == ".safetensors") shards.push_back(entry.path());
  }
  std::sort(shards.begin(), shards.end());
  const DrafterConfig c = tiny_config();
  const std::int64_t KH = c.feature_width();
  for (const auto& shard : shards) {
    const safetensors::Reader r = safetensors::Reader::open_file(shard);
    const std::vector<std::int64_t> offsets = r.int64s("offsets"), tokens = r.int64s("tokens"),
                                    mask = r.int64s("loss_mask");
    const std::vector<double> features = r.doubles("target_features");
    for (std::size_t i = 0; i + 1 < offsets.size(); ++i) {
      SeenSequence q;
      for (std::int64_t row = offsets[i]; row < offsets[i + 1]; ++row) {
        q.tokens.push_back(tokens[std::size_t(row)]);
        q.loss_mask.push_back(std::uint8_t(mask[std::size_t(row)]));
        q.target_features.insert(q.target_features.end(), features.begin() + row * KH,
                                 features.begin() + (row + 1) * KH);
      }
      set.push_back(std::move(q));
    }
  }
  const auto N = std::int64_t(set.size());
  auto epoch_order_of = [&](std::int64_t epoch) {
    std::vector<std::pair<std::uint32_t, std::int64_t>> keyed;
    for (std::int64_t i = 0; i < N; ++i) {
      const Philox4x32 counter{{std::uint32_t(i), 0u, 0xFFFFFu, std::uint32_t(epoch)}};
      keyed.push_back({philox4x32_10(counter, philox_key_from_seed(c.seed)).v[0], i});
    }
    std::sort(keyed.begin(), keyed.end());
    return keyed;
  };
  const TrainingConfig training = load_training_config(tiny_train_config_path());
  const std::int64_t B = training.global_batch_sequences;
  ASSERT_EQ(std::int64_t(seen.size()), training.total_steps);
  ASSERT_GT(training.total_steps * B, N);  // the run crosses epochs
  for (std::int64_t t = 0; t < training.total_steps; ++t) {
    ASSERT_EQ(std::int64_t(seen[std::size_t(t)].size()), B);
    for (std::int64_t g = 0; g < B; ++g) {
      const std::int64_t position = t * B + g;
      const std::int64_t i = epoch_order_of(position / N)[std::size_t(position % N)].second;
      const SeenSequence& want = set[std::size_t(i)];
      const SeenSequence& got = seen[std::size_t(t)][std::size_t(g)];
      const auto rows = std::min<std::size_t>(want.tokens.size(), std::size_t(training.max_context));
      ASSERT_EQ(got.g, g);
      EXPECT_EQ(got.tokens, std::vector<std::int64_t>(want.tokens.begin(), want.tokens.begin() + rows))
          << "step " << t << " g " << g << ": sequence " << i;
      EXPECT_EQ(got.loss_mask, std::vector<std::uint8_t>(want.loss_mask.begin(), want.loss_mask.begin() + rows))
          << "step " << t << " g " << g;
      EXPECT_EQ(got.target_features,
                std::vector<double>(want.target_features.begin(), want.target_features.begin() + rows * KH))
          << "step " << t << " g " << g;
    }
  }
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
  EXPECT_THAT(log, HasSubstr("last checkpoint " + (dir / "run" / "step-00000007").string()));
  EXPECT_EQ(latest_checkpoint(dir / "run"), dir / "run" / "step-00000007");
  EXPECT_EQ(read_metrics_file(dir / "run" / "metrics.jsonl").size(), 7u);

  o.after_step = nullptr;
  o.resume = true;
  ASSERT_EQ(train(o, &log), 0);
  EXPECT_THAT(log, HasSubstr("resuming from"));
  EXPECT_THAT(log, HasSubstr("last checkpoint " + (dir / "run" / "step-00000020").string()));
  // One line a step: the resume cut the file back to the checkpoint's step before appending (a
  // reader that keeps one record a step would hide a repeated line).
  const std::string lines = file_text(dir / "run" / "metrics.jsonl");
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 20);
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

// TRAINING §15: SIGINT (Ctrl-C at a terminal) as SIGTERM: the step ends, a checkpoint is written,
// exit 0. Not handled, it would kill the run with nothing saved since the last checkpoint.
TEST(TrainingRun, SigintMidRunSavesTheCompletedStepAndExitsZero) {
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.after_step = [](std::int64_t t) {
    if (t == 3) std::raise(SIGINT);
  };
  std::string log;
  ASSERT_EQ(train(o, &log), 0);
  EXPECT_THAT(log, HasSubstr("stopped by signal"));
  EXPECT_EQ(latest_checkpoint(dir / "run"), dir / "run" / "step-00000004");
  EXPECT_EQ(read_metrics_file(dir / "run" / "metrics.jsonl").size(), 4u);
}

// A run stopped right after an evaluation and resumed keeps that evaluation's record and ends with
// the uninterrupted run's eval.jsonl: the same steps, the same losses.
TEST(TrainingRun, HeldOutEvaluationSurvivesAStopAndResume) {
  ScratchDirectory dir;
  auto with_eval = [&](const std::filesystem::path& out) {
    TrainingRunOptions o = options_for(out);
    o.eval_data = synthetic_run_data() / "features";
    o.eval_every = 5;
    return o;
  };
  ASSERT_EQ(train(with_eval(dir / "whole")), 0);
  TrainingRunOptions o = with_eval(dir / "run");
  o.after_step = [](std::int64_t t) {
    if (t == 4) std::raise(SIGTERM);  // step 4 is evaluated, then the run saves step 5 and stops
  };
  ASSERT_EQ(train(o), 0);
  ASSERT_EQ(eval_records(dir / "run").size(), 1u);
  o.after_step = nullptr;
  o.resume = true;
  ASSERT_EQ(train(o), 0);
  const std::vector<nlohmann::json> whole = eval_records(dir / "whole"), resumed = eval_records(dir / "run");
  ASSERT_EQ(whole.size(), 4u);
  ASSERT_EQ(resumed.size(), whole.size());
  for (std::size_t k = 0; k < whole.size(); ++k) {
    EXPECT_EQ(resumed[k].at("step"), whole[k].at("step")) << k;
    EXPECT_EQ(resumed[k].at("loss"), whole[k].at("loss")) << k;
  }
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

// The released config.json an --init run started from stays with the run across a resume (which
// has no --init), so that the final checkpoint's export keeps the keys this project does not model.
TEST(TrainingRun, InitConfigOutlivesAResume) {
  ScratchDirectory dir;
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  export_drafter(dir / "released", c, seeded_drafter_parameters(tracker, c, 77));
  nlohmann::json released = nlohmann::json::parse(file_text(dir / "released" / "config.json"));
  released["x_released_only"] = "kept";
  write_whole_file(dir / "released" / "config.json", released.dump(2));
  TrainingRunOptions o = options_for(dir / "run");
  o.init = dir / "released";
  o.after_step = [](std::int64_t t) {
    if (t == 6) std::raise(SIGTERM);
  };
  ASSERT_EQ(train(o), 0);
  o.init.reset();
  o.after_step = nullptr;
  o.resume = true;
  ASSERT_EQ(train(o), 0);
  const RunCheckpoint ck = read_run_checkpoint(dir / "run" / "step-00000020", c);
  ASSERT_TRUE(ck.config.contains(kInitConfigKey));
  EXPECT_EQ(ck.config.at(kInitConfigKey).at("x_released_only"), "kept");
}

TEST(TrainingRun, HeldOutEvaluationEveryNStepsGoesToEvalJsonl) {
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  expect_held_out_evaluation(o, uninterrupted_run());
  o.eval_every = 5;  // without --eval-data
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
  ScratchDirectory dir;
  write_set_with_damaged_shard(dir / "data", GetParam().damage);
  TrainingRunOptions o = options_for(dir / "run");
  o.data = dir / "data";
  std::vector<std::string> named = GetParam().named;
  named.push_back((dir / "data" / "b.safetensors").string());
  expect_refused_writing_nothing(o, named);
}

// The held-out set is validated as the training set is: a bad token, mask value or NaN feature in
// it would otherwise reach evaluation (a NaN eval loss, or an out-of-range embedding row).
TEST_P(RunWithMalformedShard, AsTheHeldOutSetIsRefusedBeforeAnythingIsWritten) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  std::filesystem::create_directories(dir / "eval");
  RawShard raw(valid_shard(c, 4, 9));
  GetParam().damage(raw);
  raw.write(dir / "eval" / "b.safetensors");
  TrainingRunOptions o = options_for(dir / "run");
  o.eval_data = dir / "eval";
  o.eval_every = 5;
  std::vector<std::string> named = GetParam().named;
  named.push_back((dir / "eval" / "b.safetensors").string());
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

// ---- issue 22: resumes that must not lose or overwrite what a run wrote ----

// A copy of the uninterrupted run as it was when its step-10 checkpoint was the latest, with the 20
// metrics lines a run killed after step 20's metrics but before its save leaves.
std::filesystem::path run_at_step_10(const ScratchDirectory& dir) {
  const auto run = dir / "run";
  std::filesystem::copy(uninterrupted_run(), run, std::filesystem::copy_options::recursive);
  std::filesystem::remove_all(run / "step-00000020");
  write_whole_file(run / kLatestFileName, "step-00000010\n");
  return run;
}

// The rank that resumes first (rank 0, here the only one) checks the checkpoint's hashes: one
// altered byte is refused naming the file, and nothing in the run is touched.
TEST(RunResume, AnAlteredCheckpointFileIsRefusedNamingIt) {
  ScratchDirectory dir;
  const auto run = run_at_step_10(dir);
  const auto model = run / "step-00000010" / kModelFileName;
  std::string bytes = file_text(model);
  bytes[bytes.size() / 2] ^= 0x01;
  write_whole_file(model, bytes);
  TrainingRunOptions o = options_for(run);
  o.resume = true;
  const std::vector<std::string> before = directory_listing(run);
  const std::string metrics = file_text(run / "metrics.jsonl");
  const std::string message = input_error_message([&] { train(o); });
  EXPECT_THAT(message, HasSubstr(model.string()));
  EXPECT_THAT(message, HasSubstr("does not match"));
  EXPECT_EQ(directory_listing(run), before);
  EXPECT_EQ(file_text(run / "metrics.jsonl"), metrics);
}

// Class 6: step-*/ but no `latest`, then --resume with another config: "no checkpoint, starting at
// step 0", and the old checkpoints and metrics.jsonl were replaced. Refused, nothing touched; so is
// a run over another run's metrics.jsonl with no checkpoint to resume from.
TEST(RunResume, CheckpointsWithoutLatestAreRefusedAndNothingIsTouched) {
  ScratchDirectory dir;
  const auto run = run_at_step_10(dir);
  std::filesystem::remove(run / kLatestFileName);
  nlohmann::json j = nlohmann::json::parse(file_text(tiny_train_config_path()));
  j["learning_rate"] = 0.02;
  write_whole_file(dir / "other.json", j.dump());
  TrainingRunOptions o = options_for(run);
  o.config = dir / "other.json";
  o.resume = true;
  const std::vector<std::string> before = directory_listing(run);
  const std::string metrics = file_text(run / "metrics.jsonl"),
                    model = file_text(run / "step-00000010" / kModelFileName);
  const std::string message = input_error_message([&] { train(o); });
  EXPECT_THAT(message, HasSubstr("step-00000010"));
  EXPECT_THAT(message, HasSubstr("no 'latest'"));
  EXPECT_EQ(directory_listing(run), before);
  EXPECT_EQ(file_text(run / "metrics.jsonl"), metrics);
  EXPECT_EQ(file_text(run / "step-00000010" / kModelFileName), model);

  std::filesystem::remove_all(run / "step-00000010");
  for (const bool resume : {true, false}) {
    o.resume = resume;
    EXPECT_THAT(input_error_message([&] { train(o); }), HasSubstr((run / "metrics.jsonl").string())) << resume;
    EXPECT_EQ(file_text(run / "metrics.jsonl"), metrics) << resume;
  }
}

// Lowers the file size limit while it lives, SIGXFSZ ignored: a write past it fails with EFBIG, as a
// full disk fails one with ENOSPC.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lowered);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = SIG_DFL;
};

// Class 7: a disk that refuses writes during a resume (the save before it had failed the same way):
// the resume's rewrite of metrics.jsonl renamed a short file over it, unchecked, and every earlier
// line was lost. The failure is reported naming the file; every line stays; a later resume ends as
// the uninterrupted run.
TEST(RunResume, DiskRefusingWritesDuringAResumeKeepsEveryMetricsLine) {
  ScratchDirectory dir;
  const auto run = run_at_step_10(dir);
  const std::string metrics = file_text(run / "metrics.jsonl");
  TrainingRunOptions o = options_for(run);
  o.resume = true;
  std::string message;
  {
    const FileSizeLimit limit(1024);  // ten metrics lines are ~6 kB
    try {
      train(o);
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  EXPECT_THAT(message, HasSubstr((run / "metrics.jsonl").string()));
  EXPECT_THAT(message, HasSubstr("File too large"));
  EXPECT_EQ(file_text(run / "metrics.jsonl"), metrics);
  EXPECT_EQ(latest_checkpoint(run), run / "step-00000010");

  ASSERT_EQ(train(o), 0);
  const std::vector<StepRecord> a = read_metrics_file(run / "metrics.jsonl"),
                                b = read_metrics_file(uninterrupted_run() / "metrics.jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t t = 0; t < a.size(); ++t) EXPECT_EQ(a[t].loss, b[t].loss) << t;
  EXPECT_EQ(file_text(run / "step-00000020" / kModelFileName),
            file_text(uninterrupted_run() / "step-00000020" / kModelFileName));
}

// Class 13: a resume on another data set (here: the same sequences in three shards, not two) was
// accepted. It is refused, naming --data, the two fingerprints and the flag; with the flag it runs.
// A resume against a target of another depth than the one the run recorded is refused, naming it:
// the export would write the recorded depth for a drafter trained against another target.
TEST(RunResume, AnotherTargetDepthIsRefusedNamingIt) {
  ScratchDirectory dir;
  const auto run = run_at_step_10(dir);
  TrainingRunOptions o = options_for(run);
  o.target = target_of_depth(dir.path(), 6);
  o.resume = true;
  const std::vector<std::string> before = directory_listing(run);
  EXPECT_THAT(input_error_message([&] { train(o); }), HasSubstr("num_target_layers"));
  EXPECT_EQ(directory_listing(run), before);
}

// A checkpoint that records no data set (its trainer_state.json edited, or written by hand) is not
// taken as matching any --data: the resume is refused unless --allow-other-data says so.
TEST(RunResume, ACheckpointRecordingNoDataSetIsRefusedUnlessAllowed) {
  ScratchDirectory dir;
  const auto run = run_at_step_10(dir);
  const auto state_file = run / "step-00000010" / kTrainerStateFileName;
  nlohmann::json state = nlohmann::json::parse(file_text(state_file));
  ASSERT_TRUE(state.contains("data_set"));
  state.erase("data_set");
  std::filesystem::remove(state_file);
  write_whole_file(state_file, state.dump(2));
  TrainingRunOptions o = options_for(run);
  o.resume = true;
  EXPECT_THAT(input_error_message([&] { train(o); }), HasSubstr("--allow-other-data"));
  o.allow_other_data = true;
  EXPECT_EQ(train(o), 0);
}

// A run killed at step 20 after saving step 10 (SIGKILL: no save at the end) has metrics lines past
// its checkpoint; the resume cuts them back to step 10 before appending, so every step has exactly
// one line, in order (read_metrics_file keeps one record a step: the raw lines are checked).
TEST(RunResume, MetricsPastTheCheckpointAreCutBackBeforeTheResumeAppends) {
  ScratchDirectory dir;
  const auto run = run_at_step_10(dir);
  TrainingRunOptions o = options_for(run);
  o.resume = true;
  ASSERT_EQ(train(o), 0);
  std::istringstream lines(file_text(run / "metrics.jsonl"));
  std::int64_t expected = 0;
  for (std::string line; std::getline(lines, line); ++expected) {
    EXPECT_EQ(nlohmann::json::parse(line).at("step"), expected);
  }
  EXPECT_EQ(expected, 20);
}

// --keep K through the run: after saves every 5 steps, only the K newest checkpoints remain.
TEST(TrainingRun, KeepLeavesTheNewestCheckpoints) {
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.save_every = 5;
  o.keep = 2;
  ASSERT_EQ(train(o), 0);
  EXPECT_EQ(run_checkpoints(dir / "run"),
            (std::vector<std::filesystem::path>{dir / "run" / "step-00000015", dir / "run" / "step-00000020"}));
}

TEST(RunResume, AnotherDataSetIsRefusedUnlessAllowed) {
  ScratchDirectory dir;
  const auto run = run_at_step_10(dir);
  SyntheticDataSpec spec;
  spec.sequences = 24;
  spec.shards = 3;
  write_synthetic_data(tiny_config(), spec, dir / "other");
  TrainingRunOptions o = options_for(run);
  o.data = dir / "other" / "features";
  o.resume = true;
  const std::vector<std::string> before = directory_listing(run);
  const std::string message = input_error_message([&] { train(o); });
  EXPECT_THAT(message, HasSubstr("invalid --data"));
  EXPECT_THAT(message, HasSubstr("shard-00002.safetensors"));
  EXPECT_THAT(message, HasSubstr("--allow-other-data"));
  EXPECT_EQ(directory_listing(run), before);
  o.allow_other_data = true;
  EXPECT_EQ(train(o), 0);
  EXPECT_EQ(latest_checkpoint(run), run / "step-00000020");
}

// A resume of run_at_step_10 that stops (SIGTERM) after step 11: it rewrites metrics.jsonl, appends
// the lines of steps 10 and 11, and saves step-00000012.
TrainingRunOptions resume_to_step_12(const std::filesystem::path& run) {
  TrainingRunOptions o = options_for(run);
  o.resume = true;
  o.after_step = [](std::int64_t t) {
    if (t == 11) std::raise(SIGTERM);
  };
  return o;
}

// Fault injection (issue 22): every operation on metrics.jsonl of a resumed run (its rewrite, the
// opening, the write and the flush of each line) and, in turn, the ones of the save after them
// fails with ENOSPC and with EIO. The run stops with the error; `latest` and its checkpoint are
// intact, and so is every line of a step before the checkpoint, with no partial line; the next
// resume ends exactly as the run that never failed.
TEST(RunResume, EveryFailedWriteOfAMetricsLineOrASaveLosesNothing) {
  ScratchDirectory dir;
  const auto reference = run_at_step_10(dir);
  ASSERT_EQ(train(resume_to_step_12(reference)), 0);
  const std::vector<StepRecord> want_metrics = read_metrics_file(reference / "metrics.jsonl");
  const std::string want_model = file_text(reference / "step-00000012" / kModelFileName);
  ASSERT_EQ(want_metrics.size(), 12u);
  const auto is_metrics = [](FileOperation, const std::filesystem::path& p) { return p.filename() == "metrics.jsonl"; };
  // The rest: the save of step-00000012 and `latest`, and the flushes of the run directory.
  const auto is_save_or_directory = [](FileOperation, const std::filesystem::path& p) {
    return p.filename() != "metrics.jsonl";
  };
  std::int64_t metrics_operations = 0, other_operations = 0;
  {
    ScratchDirectory d;
    const auto run = run_at_step_10(d);
    const testing::FileFaultInjector metrics(-1, 0, is_metrics);
    ASSERT_EQ(train(resume_to_step_12(run)), 0);
    metrics_operations = metrics.operations_seen();
  }
  {
    ScratchDirectory d;
    const auto run = run_at_step_10(d);
    const testing::FileFaultInjector save(-1, 0, is_save_or_directory);
    ASSERT_EQ(train(resume_to_step_12(run)), 0);
    other_operations = save.operations_seen();
  }
  ASSERT_EQ(metrics_operations, 9);  // the rewrite (create, write, flush, rename), the opening, 2 x (write, flush)
  ASSERT_GT(other_operations, 20);
  const std::vector<StepRecord> before = read_metrics_file(uninterrupted_run() / "metrics.jsonl");
  struct Case {
    testing::FileFaultInjector::Selection selected;
    std::int64_t at;
  };
  std::vector<Case> cases;
  for (std::int64_t k = 0; k < metrics_operations; ++k) cases.push_back({is_metrics, k});
  for (std::int64_t k = 0; k < other_operations; ++k) cases.push_back({is_save_or_directory, k});
  for (const int error_number : {ENOSPC, EIO}) {
    for (const Case& c : cases) {
      ScratchDirectory d;
      const auto run = run_at_step_10(d);
      std::string message, failed;
      {
        const testing::FileFaultInjector fault(c.at, error_number, c.selected);
        try {
          train(resume_to_step_12(run));
        } catch (const std::runtime_error& e) {
          message = e.what();
        }
        failed = fault.failed();
      }
      ASSERT_FALSE(failed.empty());
      EXPECT_THAT(message, HasSubstr(std::strerror(error_number))) << failed;
      const auto latest = latest_checkpoint(run);
      ASSERT_TRUE(latest.has_value()) << failed;
      EXPECT_NO_THROW(read_run_checkpoint(*latest, tiny_config())) << failed;
      EXPECT_NO_THROW(read_run_checkpoint(run / "step-00000010", tiny_config())) << failed;
      // Every line of steps 0..9 as it was, in order; whatever else is there is whole lines.
      const std::string text = file_text(run / "metrics.jsonl");
      ASSERT_FALSE(text.empty()) << failed;
      EXPECT_EQ(text.back(), '\n') << failed;
      const std::vector<StepRecord> kept = read_metrics_file(run / "metrics.jsonl");
      ASSERT_GE(kept.size(), 10u) << failed;
      for (std::size_t t = 0; t < 10; ++t) EXPECT_EQ(kept[t].loss, before[t].loss) << failed << " step " << t;

      // Failed after `latest` was renamed to name step 12 (the directory's flush): the save is whole.
      if (*latest != run / "step-00000012") {
        ASSERT_EQ(train(resume_to_step_12(run)), 0) << failed;
      }
      const std::vector<StepRecord> after = read_metrics_file(run / "metrics.jsonl");
      ASSERT_EQ(after.size(), want_metrics.size()) << failed;
      for (std::size_t t = 0; t < after.size(); ++t)
        EXPECT_EQ(after[t].loss, want_metrics[t].loss) << failed << " " << t;
      EXPECT_EQ(file_text(run / "step-00000012" / kModelFileName), want_model) << failed;
    }
  }
}

// Class 4: a shard cut short while `train` runs killed it with SIGBUS (no checkpoint, the steps since
// the last save lost). The run ends with an error naming the shard, after saving the last completed
// step; restored, the data resumes to the uninterrupted run's end, bitwise.
TEST(RunResume, ShardCutShortWhileTrainingIsNamedAfterASave) {
  ScratchDirectory dir;
  std::filesystem::copy(synthetic_run_data() / "features", dir / "features");
  TrainingRunOptions o = options_for(dir / "run");
  o.data = dir / "features";
  o.after_step = [&](std::int64_t t) {
    if (t != 3) return;
    for (const char* shard : {"shard-00000.safetensors", "shard-00001.safetensors"})
      std::filesystem::resize_file(dir / "features" / shard, 4096);
  };
  const std::string message = input_error_message([&] { train(o); });
  EXPECT_THAT(message, HasSubstr((dir / "features").string()));
  EXPECT_THAT(message, HasSubstr("shrank from"));
  EXPECT_THAT(message, HasSubstr("saved step 4"));
  EXPECT_EQ(latest_checkpoint(dir / "run"), dir / "run" / "step-00000004");
  EXPECT_EQ(read_metrics_file(dir / "run" / "metrics.jsonl").size(), 4u);

  std::filesystem::remove_all(dir / "features");
  std::filesystem::copy(synthetic_run_data() / "features", dir / "features");
  o.after_step = nullptr;
  o.resume = true;
  ASSERT_EQ(train(o), 0);
  EXPECT_EQ(file_text(dir / "run" / "step-00000020" / kModelFileName),
            file_text(uninterrupted_run() / "step-00000020" / kModelFileName));
}

// Class 12 (the trainer's half): a trainer_state.json whose seed is not the config's is refused.
TEST(RunResume, StateWithAnotherSeedIsRefusedNamingIt) {
  ScratchDirectory dir;
  const auto run = run_at_step_10(dir);
  const auto state_path = run / "step-00000010" / kTrainerStateFileName;
  nlohmann::json state = nlohmann::json::parse(file_text(state_path));
  state["seed"] = state["seed"].get<std::uint64_t>() + 1;
  write_whole_file(state_path, state.dump(2));
  TrainingRunOptions o = options_for(run);
  o.resume = true;
  const std::string message = input_error_message([&] { train(o); });
  EXPECT_THAT(message, HasSubstr(state_path.string() + ": seed"));
}

// Without a GPU (or without CUDA in the build), --backend cuda is refused after the plan gate,
// naming --backend and why, before anything is written. Where a GPU is, ci/gpu runs the CUDA run.
// The NCCL wait's limit, when it is not a number of seconds: refused by name before the run scans
// its data or writes anything (on a machine with or without a GPU), and only for the CUDA backend.
TEST(RunBadInput, ABadNcclTimeoutIsRefusedByNameBeforeAnything) {
  ScratchDirectory dir;
  TrainingRunOptions o = options_for(dir / "run");
  o.backend = TrainingBackend::cuda;
  o.data = dir / "no-such-data";  // a data error would name this instead
  ::setenv("DFLASH_NCCL_TIMEOUT_S", "90s", 1);
  expect_refused_writing_nothing(o, {"DFLASH_NCCL_TIMEOUT_S", "'90s'"});
  o.backend = TrainingBackend::cpu;
  const std::string reference = input_error_message([&] { train(o); });
  ::unsetenv("DFLASH_NCCL_TIMEOUT_S");
  EXPECT_THAT(reference, ::testing::Not(HasSubstr("DFLASH_NCCL_TIMEOUT_S"))) << "the CPU backend has no NCCL wait";
}

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
