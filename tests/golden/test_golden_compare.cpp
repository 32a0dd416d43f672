// `dflash golden compare` as a library: result files made from a golden, rounded, and with planted
// errors, judged under each rule; the bounds of golden/compare_rules.hpp; one test per
// malformed result file.

#include <cmath>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "golden/check.hpp"
#include "golden/compare.hpp"
#include "reference/bf16_tolerance.hpp"
#include "tests/golden/golden_test_support.hpp"

namespace dflash {
namespace {

using golden_testing::committed_golden;
using golden_testing::input_error_of;
using golden_testing::ScratchDirectory;
using safetensors::Dtype;
using ::testing::HasSubstr;

// Two layers, GQA, decay, chunked loss head: small enough to judge in milliseconds.
constexpr const char* kCase = "gqa-sliding";

const Golden& golden() {
  static const Golden g = read_golden(committed_golden(kCase));
  return g;
}

// The golden's own output/ and grad/ tensors, each stored as `dtype` (rounded once to nearest).
ResultFile results_stored_as(Dtype dtype) {
  ResultFile r{"made from " + std::string(kCase), {}};
  for (const auto& [name, t] : golden().results) {
    ResultTensor rt{name, dtype, t.shape, t.values};
    std::byte element[8];
    for (double& v : rt.values) {
      safetensors::store_float_element(dtype, v, element);
      v = safetensors::load_float_element(dtype, element);
    }
    r.tensors.push_back(std::move(rt));
  }
  return r;
}

ResultTensor& tensor(ResultFile& r, const std::string& name) {
  for (ResultTensor& t : r.tensors) {
    if (t.name == name) return t;
  }
  throw std::out_of_range(name);
}

std::vector<std::string> failing(const CompareReport& report) {
  std::vector<std::string> names;
  for (const CompareRow& row : report.rows) {
    if (!row.passed()) names.push_back(row.tensor);
  }
  return names;
}

const CompareRow& row_of(const CompareReport& report, const std::string& name) {
  for (const CompareRow& row : report.rows) {
    if (row.tensor == name) return row;
  }
  throw std::out_of_range(name);
}

constexpr CompareRule kRules[] = {CompareRule::exact, CompareRule::fp32, CompareRule::bf16};

// The report fails on `name` alone, saying `why`.
void expect_only_failure(const CompareReport& report, const std::string& name, const std::string& why) {
  EXPECT_THAT(failing(report), ::testing::ElementsAre(name));
  EXPECT_THAT(row_of(report, name).note, HasSubstr(why));
}

TEST(GoldenCompare, TheGoldenFileItselfPassesExactWithItsInputsIgnored) {
  const CompareReport report = compare_results(golden(), read_result_file(committed_golden(kCase)), CompareRule::exact);
  EXPECT_TRUE(report.passed()) << ::testing::PrintToString(failing(report));
  EXPECT_EQ(report.rows.size(), golden().results.size());
  EXPECT_TRUE(report.missing.empty());
  EXPECT_THAT(report.ignored, ::testing::Contains("input/tokens"));
  EXPECT_THAT(report.ignored, ::testing::Contains("param/fc.weight"));
  for (const CompareRow& row : report.rows) EXPECT_EQ(row.error, 0) << row.tensor;
}

TEST(GoldenCompare, Bf16RoundedResultsPassBf16AndFailExact) {
  // Stored as BF16: exact and fp32 refuse the storage itself, for every tensor whose rounding is not exact.
  const ResultFile stored_bf16 = results_stored_as(Dtype::BF16);
  EXPECT_TRUE(compare_results(golden(), stored_bf16, CompareRule::bf16).passed());
  const CompareReport exact = compare_results(golden(), stored_bf16, CompareRule::exact);
  EXPECT_EQ(exact.failures(), int(golden().results.size()));
  EXPECT_THAT(row_of(exact, "output/lse").note, HasSubstr("stored as BF16, coarser than the exact rule's F64"));
  // The same values widened back to F64: exact fails them on their error alone. Under bf16 the
  // step's tensors still pass, while a loss-head quantity rounded to bf16 but claiming F64 storage
  // is held to the calibrated computation bound alone, which bf16 rounding of the loss exceeds.
  ResultFile widened = stored_bf16;
  for (ResultTensor& t : widened.tensors) t.dtype = Dtype::F64;
  for (const CompareRow& row : compare_results(golden(), widened, CompareRule::bf16).rows) {
    if (!is_loss_head_result(row.tensor)) {
      EXPECT_TRUE(row.passed()) << row.tensor;
    }
  }
  EXPECT_FALSE(row_of(compare_results(golden(), widened, CompareRule::bf16), "output/ce").passed());
  const CompareReport exact_widened = compare_results(golden(), widened, CompareRule::exact);
  EXPECT_FALSE(exact_widened.passed());
  EXPECT_THAT(failing(exact_widened), ::testing::Contains("grad/fc.weight"));
  EXPECT_THAT(failing(exact_widened), ::testing::Contains("output/lse"));
}

TEST(GoldenCompare, Fp32RoundedResultsPassFp32AndBf16AndFailExact) {
  const ResultFile f32 = results_stored_as(Dtype::F32);
  EXPECT_TRUE(compare_results(golden(), f32, CompareRule::fp32).passed());
  EXPECT_TRUE(compare_results(golden(), f32, CompareRule::bf16).passed());
  EXPECT_FALSE(compare_results(golden(), f32, CompareRule::exact).passed());
}

TEST(GoldenCompare, AGradientScaledByOnePointOneFailsUnderEveryRuleNamingIt) {
  for (CompareRule rule : kRules) {
    ResultFile r = results_stored_as(Dtype::F64);
    for (double& v : tensor(r, "grad/layers.0.mlp.down_proj.weight").values) v *= 1.1;
    const CompareReport report = compare_results(golden(), r, rule);
    EXPECT_THAT(failing(report), ::testing::ElementsAre("grad/layers.0.mlp.down_proj.weight"))
        << compare_rule_name(rule);
  }
}

TEST(GoldenCompare, AnLseRowShiftedByATenthFailsUnderEveryRuleNamingIt) {
  const std::vector<double>& weights = golden().results.at("output/weights").values;
  const auto labelled = std::find_if(weights.begin(), weights.end(), [](double w) { return w > 0; }) - weights.begin();
  for (CompareRule rule : kRules) {
    ResultFile r = results_stored_as(Dtype::F64);
    tensor(r, "output/lse").values.at(std::size_t(labelled)) += 0.1;
    const CompareReport report = compare_results(golden(), r, rule);
    EXPECT_THAT(failing(report), ::testing::ElementsAre("output/lse")) << compare_rule_name(rule);
  }
}

TEST(GoldenCompare, AGradientOffByOnePartIn10000FailsFp32AndExactButNotBf16) {
  ResultFile r = results_stored_as(Dtype::F64);
  for (double& v : tensor(r, "grad/norm.weight").values) v *= 1 + 1e-4;
  EXPECT_THAT(failing(compare_results(golden(), r, CompareRule::exact)), ::testing::ElementsAre("grad/norm.weight"));
  EXPECT_THAT(failing(compare_results(golden(), r, CompareRule::fp32)), ::testing::ElementsAre("grad/norm.weight"));
  EXPECT_TRUE(compare_results(golden(), r, CompareRule::bf16).passed());
}

TEST(GoldenCompare, TheErrorIsOverTheGoldensLargestValueNotTheResults) {
  // SPEC §10: the largest difference over the largest *reference* value. A gradient doubled differs
  // by exactly the golden's values (error 1), one halved by half of them (error 0.5); measured over
  // the result's own values both would read 0.5 and 1, and a result scaled up would look closer.
  for (const auto& [scale, error] : {std::pair{2.0, 1.0}, std::pair{0.5, 0.5}}) {
    ResultFile r = results_stored_as(Dtype::F64);
    for (double& v : tensor(r, "grad/norm.weight").values) v *= scale;
    EXPECT_EQ(row_of(compare_results(golden(), r, CompareRule::exact), "grad/norm.weight").error, error) << scale;
  }
}

TEST(GoldenCompare, ATensorOfTheWrongShapeFailsNamingBothShapes) {
  ResultFile r = results_stored_as(Dtype::F64);
  ResultTensor& lse = tensor(r, "output/lse");
  lse.shape = {lse.shape.at(0) * lse.shape.at(1)};
  expect_only_failure(compare_results(golden(), r, CompareRule::bf16), "output/lse",
                      "shape [32], the golden has [2, 16]");
  // Also where the bound is infinite (bf16 accuracy of a golden accuracy 0 with an ambiguous row).
  ResultFile scalar = results_stored_as(Dtype::F64);
  tensor(scalar, "output/accuracy").shape = {1};
  EXPECT_THAT(failing(compare_results(golden(), scalar, CompareRule::bf16)), ::testing::ElementsAre("output/accuracy"));
}

TEST(GoldenCompare, ATensorOfANonFloatDtypeFailsNamingTheDtype) {
  ResultFile r = results_stored_as(Dtype::F64);
  tensor(r, "grad/fc.weight").dtype = Dtype::I64;
  expect_only_failure(compare_results(golden(), r, CompareRule::bf16), "grad/fc.weight",
                      "dtype I64 is not a result dtype (F64, F32 or BF16)");
}

TEST(GoldenCompare, Bf16StorageUnderTheFp32RuleFailsSayingSo) {
  ResultFile r = results_stored_as(Dtype::F32);
  tensor(r, "output/hidden").dtype = Dtype::BF16;
  expect_only_failure(compare_results(golden(), r, CompareRule::fp32), "output/hidden",
                      "coarser than the fp32 rule's F32");
}

TEST(GoldenCompare, ANameNotInTheGoldenFailsNamingIt) {
  ResultFile r = results_stored_as(Dtype::F64);
  r.tensors.push_back({"grad/target_features", Dtype::F32, {1}, {0.0}});
  expect_only_failure(compare_results(golden(), r, CompareRule::exact), "grad/target_features",
                      "not an output/ or grad/ tensor of the golden");
}

TEST(GoldenCompare, ANonFiniteValueFailsNamingTheElement) {
  for (const auto& [bad, text] : {std::pair{std::numeric_limits<double>::quiet_NaN(), "nan"},
                                  std::pair{std::numeric_limits<double>::infinity(), "inf"},
                                  std::pair{-std::numeric_limits<double>::infinity(), "-inf"}}) {
    ResultFile r = results_stored_as(Dtype::F64);
    tensor(r, "grad/norm.weight").values.at(3) = bad;
    expect_only_failure(compare_results(golden(), r, CompareRule::bf16), "grad/norm.weight",
                        std::string("element 3 is ") + text);
  }
}

TEST(GoldenCompare, APartialResultIsJudgedAndTheRestListedMissing) {
  ResultFile r = results_stored_as(Dtype::F32);
  std::erase_if(r.tensors, [](const ResultTensor& t) { return t.name.starts_with("grad/"); });
  const CompareReport report = compare_results(golden(), r, CompareRule::fp32);
  EXPECT_TRUE(report.passed());
  EXPECT_THAT(report.missing, ::testing::Contains("grad/fc.weight"));
  EXPECT_EQ(report.rows.size() + report.missing.size(), golden().results.size());
}

TEST(GoldenCompare, AResultWithNoResultTensorsIsAnErrorNamingTheFile) {
  const ResultFile r{"inputs.safetensors", {{"input/tokens", Dtype::I64, {2, 20}, {}}}};
  EXPECT_THAT(input_error_of([&] { compare_results(golden(), r, CompareRule::exact); }),
              HasSubstr("'inputs.safetensors' holds none of the output/ or grad/ tensors"));
}

TEST(GoldenCompare, AnEmptyResultFileIsAnErrorNamingIt) {
  ScratchDirectory dir;
  safetensors::testing::write_whole_file(dir / "empty.safetensors", std::string_view(""));
  EXPECT_THAT(input_error_of([&] { read_result_file(dir / "empty.safetensors"); }),
              HasSubstr((dir / "empty.safetensors").string()));
}

TEST(GoldenCompare, ATruncatedResultFileIsAnErrorNamingIt) {
  ScratchDirectory dir;
  std::vector<std::byte> bytes = safetensors::testing::read_whole_file(committed_golden(kCase));
  bytes.resize(bytes.size() - 100);
  safetensors::testing::write_whole_file(dir / "cut.safetensors", bytes);
  EXPECT_THAT(input_error_of([&] { read_result_file(dir / "cut.safetensors"); }),
              HasSubstr((dir / "cut.safetensors").string()));
}

TEST(GoldenCompare, TheJsonReportHasEveryRowAndNullForAnInfiniteError) {
  ResultFile r = results_stored_as(Dtype::F64);
  tensor(r, "output/lse").shape = {1};
  const nlohmann::json j = compare_report_json(compare_results(golden(), r, CompareRule::exact));
  EXPECT_EQ(j.at("rule"), "exact");
  EXPECT_EQ(j.at("passed"), false);
  EXPECT_EQ(j.at("failures"), 1);
  EXPECT_EQ(j.at("tensors").size(), golden().results.size());
  for (const nlohmann::json& t : j.at("tensors")) {
    if (t.at("name") == "output/lse") {
      EXPECT_TRUE(t.at("error").is_null());
      EXPECT_EQ(t.at("passed"), false);
    } else {
      EXPECT_EQ(t.at("error"), 0.0);
    }
  }
}

// ---- the bounds ----------------------------------------------------------------------------------

TEST(GoldenCompareBounds, StepBoundsAreTheDocumentedValues) {
  // golden/compare_rules.hpp quotes these for the mid config and two tiny layers.
  const DrafterConfig mid = load_drafter_config(std::filesystem::path(DFLASH_SOURCE_DIR) / "configs/mid.json");
  EXPECT_NEAR(step_result_bound(CompareRule::fp32, mid, 1, 64, 512), 6.1e-5, 0.05e-5);
  EXPECT_NEAR(step_result_bound(CompareRule::bf16, mid, 1, 64, 512), 0.088, 0.0005);
  const DrafterConfig& tiny = golden_case("tiny-full").config;  // 2 x 14 context, 3 x 4 block rows
  EXPECT_NEAR(step_result_bound(CompareRule::fp32, tiny, 2, 14, 12), 3.7e-6, 0.05e-6);
  EXPECT_NEAR(step_result_bound(CompareRule::bf16, tiny, 2, 14, 12), 0.0585, 0.0005);
  EXPECT_EQ(step_result_bound(CompareRule::exact, mid, 1, 64, 512), kReferenceTolerance);
}

TEST(GoldenCompareBounds, TheStorageRoundingIsAddedToTheLossHeadBoundsOnly) {
  EXPECT_EQ(stored_result_bound("output/loss", 1e-5, Dtype::BF16), 1e-5 + 0x1p-8);
  EXPECT_EQ(stored_result_bound("output/lse", 1e-5, Dtype::F32), 1e-5 + 0x1p-24);
  EXPECT_EQ(stored_result_bound("grad/fc.weight", 0.05, Dtype::BF16), 0.05);
}

TEST(GoldenCompareBounds, LossHeadBoundsAreTwiceAPlainComputationPlusTheFloor) {
  const auto fp32 = golden_result_bounds(golden(), CompareRule::fp32);
  const auto bf16 = golden_result_bounds(golden(), CompareRule::bf16);
  for (const char* name : {"output/loss", "output/lse", "output/token_loss"}) {
    // The plain fp32 computation is not exact, and closer than the bf16 one.
    EXPECT_GT(fp32.at(name), kFp32Floor) << name;
    EXPECT_LT(fp32.at(name), 2 * kFp32Floor) << name;
    EXPECT_GT(bf16.at(name), fp32.at(name)) << name;
  }
  const std::int64_t T = golden().results.at("output/hidden").shape.at(1);
  EXPECT_EQ(bf16.at("grad/fc.weight"), step_result_bound(CompareRule::bf16, golden().config, golden().num_sequences(),
                                                         golden().context_length(), T));
  for (const auto& [name, bound] : golden_result_bounds(golden(), CompareRule::exact)) {
    EXPECT_EQ(bound, kReferenceTolerance) << name;
  }
}

}  // namespace
}  // namespace dflash
