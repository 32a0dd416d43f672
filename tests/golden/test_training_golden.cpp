// The committed training golden (golden/data/training): the reference recomputes it, regenerating
// it gives the same tensors, a perturbed result fails on exactly that tensor, a malformed file is
// refused naming the problem, and the case has the properties it claims.
#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "common/tolerances.hpp"
#include "golden/training.hpp"
#include "io/safetensors_reader.hpp"
#include "io/safetensors_writer.hpp"
#include "reference/compare.hpp"

namespace dflash {
namespace {

std::filesystem::path committed() { return default_training_golden_dir() / "tiny-3-steps.safetensors"; }

std::filesystem::path scratch(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "dflash_training_golden_test";
  std::filesystem::create_directories(dir);
  return dir / name;
}

TEST(TrainingGolden, TheReferenceRecomputesTheCommittedGolden) {
  const std::vector<GoldenCheckRow> rows =
      check_training_golden_file(committed(), reference_training_golden_implementation());
  const std::int64_t tensors =
      static_cast<std::int64_t>(training_golden_case("tiny-3-steps").config.num_hidden_layers) * 11 + 3;
  EXPECT_EQ(static_cast<std::int64_t>(rows.size()), 3 * tensors + 9);  // final param, m, v per tensor; 9 metrics
  for (const GoldenCheckRow& r : rows) EXPECT_TRUE(r.passed()) << r.tensor << ": " << r.error << " " << r.note;
}

TEST(TrainingGolden, RegeneratingGivesTheCommittedTensors) {
  const TrainingGolden fresh = generate_training_golden(training_golden_case("tiny-3-steps"));
  const TrainingGolden stored = read_training_golden(committed());
  ASSERT_EQ(fresh.results.size(), stored.results.size());
  for (const auto& [name, t] : stored.results) {
    const GoldenTensor& f = fresh.results.at(name);
    EXPECT_EQ(f.shape, t.shape) << name;
    EXPECT_LE(relative_error(std::span<const double>(f.values), std::span<const double>(t.values)),
              kGoldenRegenerateTolerance)
        << name;
  }
  ASSERT_EQ(fresh.batches.size(), stored.batches.size());
  for (std::size_t s = 0; s < fresh.batches.size(); ++s) {
    EXPECT_EQ(fresh.batches[s].tokens.values(), stored.batches[s].tokens.values());
    EXPECT_EQ(fresh.batches[s].loss_mask.values(), stored.batches[s].loss_mask.values());
    EXPECT_EQ(fresh.batches[s].target_features.values(), stored.batches[s].target_features.values());
  }
}

TEST(TrainingGolden, TheCaseHasWhatItClaims) {
  const TrainingGolden g = read_training_golden(committed());
  EXPECT_GT(g.config.attention_dropout, 0);
  EXPECT_GT(g.config.hidden_dropout, 0);
  EXPECT_EQ(g.steps, 3);
  EXPECT_GT(g.training.micro_steps, 1);
  EXPECT_GT(g.training.weight_decay, 0);
  EXPECT_GT(g.training.warmup_steps, 0);
  const std::vector<double>& clipped = g.results.at("metrics/clipped").values;
  EXPECT_TRUE(std::any_of(clipped.begin(), clipped.end(), [](double c) { return c == 1; })) << "clipping inactive";
  const std::vector<double>& lr = g.results.at("metrics/lr").values;
  EXPECT_NE(lr.front(), lr.back());  // the schedule moves
}

TEST(TrainingGolden, APerturbedResultFailsOnExactlyThatTensor) {
  TrainingGolden g = read_training_golden(committed());
  g.results.at("final/exp_avg/norm.weight").values[0] *= 1 + 1e-9;
  const std::filesystem::path path = scratch("perturbed.safetensors");
  write_training_golden(g, path);
  int failed = 0;
  for (const GoldenCheckRow& r : check_training_golden_file(path, reference_training_golden_implementation())) {
    if (r.passed()) continue;
    ++failed;
    EXPECT_EQ(r.tensor, "final/exp_avg/norm.weight");
  }
  EXPECT_EQ(failed, 1);
}

// A copy of the committed file with one metadata value replaced or one tensor left out.
std::vector<GoldenCheckRow> check_edited(const std::string& key, const std::string& value, const std::string& drop) {
  const safetensors::Reader reader = safetensors::Reader::open_file(committed());
  safetensors::Writer w;
  for (const auto& [k, v] : reader.metadata()) w.set_metadata(k, k == key ? value : v);
  for (const std::string& name : reader.names()) {
    if (name == drop) continue;
    const safetensors::TensorInfo& info = reader.info(name);
    w.add_bytes(name, info.dtype, info.shape, reader.tensor(name).bytes);
  }
  const std::filesystem::path path = scratch("edited.safetensors");
  w.write_file(path);
  return check_training_golden_file(path, reference_training_golden_implementation());
}

void expect_refused(const std::vector<GoldenCheckRow>& rows, const std::string& part) {
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].tensor, "(file)");
  EXPECT_FALSE(rows[0].passed());
  EXPECT_NE(rows[0].note.find(part), std::string::npos) << rows[0].note;
}

TEST(TrainingGolden, AStepGoldensFormatIsRefused) {
  expect_refused(check_edited("format", "dflash-golden", ""), "format 'dflash-golden' is not dflash-training-golden");
}
TEST(TrainingGolden, AnotherVersionIsRefused) { expect_refused(check_edited("version", "2", ""), "version '2'"); }
TEST(TrainingGolden, ASeedThatIsNotTheConfigsIsRefused) {
  expect_refused(check_edited("seed", "5", ""), "metadata seed 5 is not the config's");
}
TEST(TrainingGolden, AStepCountThatIsNotANumberIsRefused) {
  expect_refused(check_edited("steps", "three", ""), "metadata steps 'three'");
}
TEST(TrainingGolden, AMissingTensorIsRefused) {
  expect_refused(check_edited("", "", "final/exp_avg_sq/fc.weight"), "tensor 'final/exp_avg_sq/fc.weight' is missing");
}
TEST(TrainingGolden, AMissingStepInputIsRefused) {
  expect_refused(check_edited("steps", "4", ""), "tensor 'input/step3/tokens' is missing");
}

}  // namespace
}  // namespace dflash
