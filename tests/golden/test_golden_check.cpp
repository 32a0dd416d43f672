// `golden check`: the committed goldens pass under both reference implementations; a golden
// perturbed by 1e-9 fails on exactly the perturbed tensor; what an implementation produces wrong
// (unknown names, wrong shapes, nothing, an exception) fails with the reason; bad directories and
// bad files are named.
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/tolerances.hpp"
#include "golden/check.hpp"
#include "tests/golden/golden_test_support.hpp"

namespace dflash {
namespace {

using golden_testing::committed_golden;
using golden_testing::generated_bytes;
using golden_testing::RawFile;
using golden_testing::ScratchDirectory;
using golden_testing::write_raw;
using ::testing::HasSubstr;

std::set<std::string> names_of(const std::vector<GoldenCheckRow>& rows) {
  std::set<std::string> names;
  for (const GoldenCheckRow& r : rows) names.insert(r.tensor);
  return names;
}

std::vector<const GoldenCheckRow*> failures(const std::vector<GoldenCheckRow>& rows) {
  std::vector<const GoldenCheckRow*> failed;
  for (const GoldenCheckRow& r : rows) {
    if (!r.passed()) failed.push_back(&r);
  }
  return failed;
}

TEST(GoldenCheck, EveryCommittedGoldenPassesTheReferenceOnEveryOutputAndGradient) {
  const GoldenImplementation reference = reference_golden_implementation();
  for (const GoldenCase& c : golden_cases()) {
    const Golden golden = read_golden(committed_golden(c.name));
    const std::vector<GoldenCheckRow> rows = check_golden(golden, reference);
    for (const GoldenCheckRow* r : failures(rows))
      ADD_FAILURE() << c.name << " " << r->tensor << ": " << r->error << " " << r->note;
    std::set<std::string> expected;
    for (const auto& [name, t] : golden.results) expected.insert(name);
    EXPECT_EQ(names_of(rows), expected) << c.name << ": the reference must check every output/ and grad/ tensor";
    for (const GoldenCheckRow& r : rows) EXPECT_EQ(r.tolerance, kReferenceTolerance) << r.tensor;
  }
}

TEST(GoldenCheck, ReferenceLossHeadAloneReproducesTheLossOutputsFromTheStoredHidden) {
  const GoldenImplementation loss_head = reference_loss_head_golden_implementation();
  for (const GoldenCase& c : golden_cases()) {
    const std::vector<GoldenCheckRow> rows = check_golden_file(committed_golden(c.name), loss_head);
    for (const GoldenCheckRow* r : failures(rows)) ADD_FAILURE() << c.name << " " << r->tensor << ": " << r->note;
    EXPECT_EQ(names_of(rows), (std::set<std::string>{"output/accuracy", "output/ce", "output/kl", "output/loss",
                                                     "output/lse", "output/token_loss", "output/weight_sum"}));
  }
}

// Perturbs element `index` of `tensor` by `relative` times the tensor's largest magnitude (a
// norm-wise relative error of exactly that size), writes the copy and checks it.
std::vector<GoldenCheckRow> check_perturbed(const std::string& case_name, const std::string& tensor, std::size_t index,
                                            double relative, const GoldenImplementation& implementation) {
  RawFile raw = RawFile::of(generated_bytes(case_name));
  const std::size_t count = raw.tensors.at(tensor).bytes.size() / 8;
  double largest = 0;
  for (std::size_t i = 0; i < count; ++i) largest = std::max(largest, std::abs(raw.float_at(tensor, i)));
  raw.set_float(tensor, index, raw.float_at(tensor, index) + relative * largest);
  ScratchDirectory dir;
  return check_golden_file(write_raw(dir, "tampered.safetensors", raw), implementation);
}

TEST(GoldenCheck, GradientPerturbedBy1e9FailsNamingThatTensorOnly) {
  const std::string tensor = "grad/layers.1.self_attn.k_proj.weight";
  const std::vector<GoldenCheckRow> rows =
      check_perturbed("gqa-sliding", tensor, 5, 1e-9, reference_golden_implementation());
  const auto failed = failures(rows);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0]->tensor, tensor);
  EXPECT_NEAR(failed[0]->error, 1e-9, 1e-12);

  std::ostringstream table;
  EXPECT_EQ(print_golden_check_table(table, rows), 1);
  EXPECT_THAT(table.str(), HasSubstr("tampered.safetensors"));
  EXPECT_THAT(table.str(), ::testing::ContainsRegex(tensor + " +1\\.000e-09 +1e-12 +FAIL"));
  EXPECT_THAT(table.str(), HasSubstr(std::to_string(rows.size()) +
                                     " tensors in 1 files: " + std::to_string(rows.size() - 1) + " PASS, 1 FAIL"));
}

TEST(GoldenCheck, HiddenPerturbedBy1e9FailsTheFullStep) {
  const auto full = check_perturbed("tiny-full", "output/hidden", 0, 1e-9, reference_golden_implementation());
  ASSERT_EQ(failures(full).size(), 1u);
  EXPECT_EQ(failures(full)[0]->tensor, "output/hidden");
}

TEST(GoldenCheck, LossPerturbedBeyondItsFloorFails) {
  // Scalars are judged against max(|loss|, magnitude): a perturbation of 1e-9 times the value is
  // below that floor's resolution only if the loss were much smaller than the magnitude, so
  // perturb by 1e-9 of the magnitude itself.
  const Golden golden = read_golden(committed_golden("temperature-decay"));
  const double magnitude = golden_loss_magnitude(golden);
  RawFile raw = RawFile::of(generated_bytes("temperature-decay"));
  raw.set_float("output/loss", 0, raw.float_at("output/loss", 0) + 2e-9 * magnitude);
  ScratchDirectory dir;
  const auto rows = check_golden_file(write_raw(dir, "tampered.safetensors", raw), reference_golden_implementation());
  ASSERT_EQ(failures(rows).size(), 1u);
  EXPECT_EQ(failures(rows)[0]->tensor, "output/loss");
  EXPECT_NEAR(failures(rows)[0]->error, 2e-9, 1e-12);
}

TEST(GoldenCheck, RecomputesFromTheStoredAnchorsNotTheSampler) {
  // Another valid set of anchors in the file: had the check resampled them (SPEC §4 for the
  // stored seed and step) it would reproduce the stored outputs; from the stored ones it cannot.
  RawFile raw = RawFile::of(generated_bytes("tiny-full"));
  const std::vector<std::byte> stored = raw.tensors.at("input/anchors").bytes;
  for (std::size_t n = 0; n < 3; ++n) {
    raw.set_integer("input/anchors", n, static_cast<std::int64_t>(2 + 3 * n));
    raw.set_integer("input/keep", n, 1);
  }
  ASSERT_NE(raw.tensors.at("input/anchors").bytes, stored);
  ScratchDirectory dir;
  const auto rows = check_golden_file(write_raw(dir, "moved.safetensors", raw), reference_golden_implementation());
  std::set<std::string> failed;
  for (const GoldenCheckRow* r : failures(rows)) failed.insert(r->tensor);
  EXPECT_TRUE(failed.contains("output/hidden"));
  EXPECT_TRUE(failed.contains("output/loss"));
  EXPECT_TRUE(failed.contains("grad/fc.weight"));
}

TEST(GoldenCheck, FloorIsTheLossMagnitudeForLossesAndLseOnly) {
  EXPECT_EQ(golden_comparison_floor("output/loss", 7.5), 7.5);
  EXPECT_EQ(golden_comparison_floor("output/ce", 7.5), 7.5);
  EXPECT_EQ(golden_comparison_floor("output/kl", 7.5), 7.5);
  EXPECT_EQ(golden_comparison_floor("output/lse", 7.5), 7.5);
  EXPECT_EQ(golden_comparison_floor("output/token_loss", 7.5), 7.5);
  EXPECT_EQ(golden_comparison_floor("output/accuracy", 7.5), 0.0);
  EXPECT_EQ(golden_comparison_floor("output/hidden", 7.5), 0.0);
  EXPECT_EQ(golden_comparison_floor("grad/fc.weight", 7.5), 0.0);
}

TEST(GoldenCheck, MagnitudeIsTheStepsOwn) {
  // The floor computed from the stored Y equals the one the step computed internally.
  const GoldenCase& c = golden_case("gqa-sliding");
  const Golden golden = read_golden(committed_golden(c.name));
  MemoryTracker tracker;
  const DrafterStepResult<double> r =
      drafter_step(tracker, golden.config, golden.params, golden.frozen, golden.batch, golden.step_options());
  EXPECT_EQ(golden_loss_magnitude(golden), r.outputs.stats.magnitude);
  EXPECT_GT(golden_loss_magnitude(golden), 1.0);
}

// ---- what an implementation produces --------------------------------------------------------

GoldenImplementation fake(std::function<GoldenResults(MemoryTracker&, const Golden&)> compute) {
  return {"fake", "a test double", [compute](MemoryTracker& tracker, const Golden& g) {
            return with_tolerance(compute(tracker, g), kReferenceTolerance);
          }};
}

TEST(GoldenCheck, UnknownTensorFromAnImplementationFails) {
  const Golden golden = read_golden(committed_golden("tiny-full"));
  const auto rows = check_golden(golden, fake([](MemoryTracker&, const Golden& g) {
                                   GoldenResults r;
                                   r["output/loss"] = g.results.at("output/loss");
                                   r["output/dY"] = GoldenTensor{{1}, {0.0}};
                                   return r;
                                 }));
  ASSERT_EQ(failures(rows).size(), 1u);
  EXPECT_EQ(failures(rows)[0]->tensor, "output/dY");
  EXPECT_THAT(failures(rows)[0]->note, HasSubstr("not an output/ or grad/ tensor of the golden"));
}

TEST(GoldenCheck, WrongShapeFromAnImplementationFails) {
  const Golden golden = read_golden(committed_golden("tiny-full"));
  const auto rows = check_golden(golden, fake([](MemoryTracker&, const Golden& g) {
                                   GoldenResults r;
                                   GoldenTensor lse = g.results.at("output/lse");
                                   lse.shape = {lse.shape[0] * lse.shape[1]};
                                   r["output/lse"] = lse;
                                   return r;
                                 }));
  ASSERT_EQ(failures(rows).size(), 1u);
  EXPECT_TRUE(std::isinf(failures(rows)[0]->error));
  EXPECT_THAT(failures(rows)[0]->note, HasSubstr("shape [24] (24 values), the golden has [2, 12]"));
}

TEST(GoldenCheck, TensorWithoutATolerance) {
  const Golden golden = read_golden(committed_golden("tiny-full"));
  const GoldenImplementation careless{"careless", "forgets a tolerance", [](MemoryTracker&, const Golden& g) {
                                        GoldenOutputs out = with_tolerance({}, kReferenceTolerance);
                                        out.tensors["output/kl"] = g.results.at("output/kl");
                                        return out;
                                      }};
  const auto rows = check_golden(golden, careless);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_FALSE(rows[0].passed());
  EXPECT_EQ(rows[0].tensor, "output/kl");
  EXPECT_THAT(rows[0].note, HasSubstr("no tolerance"));
}

TEST(GoldenCheck, ImplementationThatProducesNothingFails) {
  const Golden golden = read_golden(committed_golden("tiny-full"));
  const auto rows = check_golden(golden, fake([](MemoryTracker&, const Golden&) { return GoldenResults{}; }));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_FALSE(rows[0].passed());
  EXPECT_THAT(rows[0].note, HasSubstr("produced no tensors"));
}

TEST(GoldenCheck, ImplementationThatThrowsFailsWithItsMessage) {
  const Golden golden = read_golden(committed_golden("tiny-full"));
  const auto rows = check_golden(
      golden, fake([](MemoryTracker&, const Golden&) -> GoldenResults { throw std::runtime_error("device lost"); }));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_FALSE(rows[0].passed());
  EXPECT_EQ(rows[0].note, "fake threw: device lost");
}

// ---- directories and files ------------------------------------------------------------------

TEST(GoldenCheckDirectory, MissingDirectoryIsNamed) {
  ScratchDirectory dir;
  EXPECT_THAT(safetensors::testing::input_error_message([&] { golden_files_in(dir / "nope"); }),
              HasSubstr("invalid golden directory: '" + (dir / "nope").string() + "' does not exist"));
}

TEST(GoldenCheckDirectory, FileInsteadOfDirectoryIsNamed) {
  ScratchDirectory dir;
  safetensors::testing::write_whole_file(dir / "f", std::string_view("x"));
  EXPECT_THAT(safetensors::testing::input_error_message([&] { golden_files_in(dir / "f"); }),
              HasSubstr("'" + (dir / "f").string() + "' is not a directory"));
}

TEST(GoldenCheckDirectory, DirectoryWithoutGoldensIsNamed) {
  ScratchDirectory dir;
  safetensors::testing::write_whole_file(dir / "README", std::string_view("no goldens here"));
  EXPECT_THAT(safetensors::testing::input_error_message([&] { golden_files_in(dir.path()); }),
              HasSubstr("'" + dir.path().string() + "' holds no *.safetensors file"));
}

TEST(GoldenCheckDirectory, CommittedDirectoryListsEveryCaseSorted) {
  std::vector<std::string> files, cases;
  for (const auto& p : golden_files_in(default_golden_dir())) files.push_back(p.filename().string());
  for (const GoldenCase& c : golden_cases()) cases.push_back(golden_file_name(c.name));
  std::sort(cases.begin(), cases.end());
  EXPECT_EQ(files, cases);
}

TEST(GoldenCheckDirectory, BadFileAmongGoodOnesFailsAloneWithItsReason) {
  ScratchDirectory dir;
  safetensors::testing::write_whole_file(dir / "a-good.safetensors", generated_bytes("short-context"));
  safetensors::testing::write_whole_file(dir / "b-bad.safetensors", std::string_view("garbage"));
  std::vector<GoldenCheckRow> rows;
  for (const auto& f : golden_files_in(dir.path())) {
    for (GoldenCheckRow& r : check_golden_file(f, reference_golden_implementation())) rows.push_back(r);
  }
  const auto failed = failures(rows);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0]->tensor, "(file)");
  EXPECT_THAT(failed[0]->file, HasSubstr("b-bad.safetensors"));
  EXPECT_THAT(failed[0]->note, HasSubstr((dir / "b-bad.safetensors").string()));
  EXPECT_GT(rows.size(), 20u);
}

}  // namespace
}  // namespace dflash
