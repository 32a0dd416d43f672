// The bf16 rule on the committed golden files (golden/bf16_rule.hpp), on the CPU: the
// tolerances a bf16 implementation is held to are earned by input and logit rounding, the exact
// reference passes under them, and a result off by more than its tolerance fails on that tensor.
#include <algorithm>
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "golden/bf16_rule.hpp"
#include "golden/cases.hpp"
#include "golden/loss_head.hpp"
#include "reference/bf16_emulation.hpp"
#include "reference/bf16_tolerance.hpp"

namespace dflash {
namespace {

class GoldenBf16Rule : public ::testing::TestWithParam<std::filesystem::path> {
 protected:
  void SetUp() override {
    golden_.emplace(read_golden(GetParam()));
    problems_.emplace(golden_loss_head_problems(tracker_, *golden_));
    tolerance_ = bf16_rule_golden_tolerances(tracker_, *golden_, *problems_);
  }
  GoldenOutputs held_to_the_rule(GoldenResults tensors) const { return GoldenOutputs{std::move(tensors), tolerance_}; }

  MemoryTracker tracker_;
  std::optional<Golden> golden_;
  std::optional<GoldenLossHeadProblems> problems_;
  std::map<std::string, double, std::less<>> tolerance_;
};

TEST_P(GoldenBf16Rule, EveryLossHeadTensorHasAToleranceAboveTheFloorWhereBf16Rounds) {
  for (const char* name : {"output/loss", "output/ce", "output/kl", "output/accuracy", "output/weight_sum",
                           "output/lse", "output/token_loss"}) {
    ASSERT_TRUE(tolerance_.contains(name)) << name;
  }
  // Rounding Y, G and W_lm to bf16 moves every logit: the losses' plain errors are not zero.
  for (const char* name : {"output/loss", "output/lse", "output/token_loss"}) {
    EXPECT_GT(tolerance_.at(name), kFp32Floor) << name;
  }
}

TEST_P(GoldenBf16Rule, TheExactReferencePassesUnderTheRule) {
  for (const GoldenCheckRow& row :
       compare_golden_outputs(*golden_, held_to_the_rule(reference_loss_head_results(tracker_, *golden_)))) {
    EXPECT_TRUE(row.passed()) << row.tensor << " " << row.error << " > " << row.tolerance;
  }
}

// The tolerance is the plain computation's own error times kPlainErrorFactor, plus the floor: a
// result kFarOff times as far from the golden as the plain computation must fail on every tensor
// whose plain error is above the floor (a tolerance loosened, by a larger factor or floor, would
// pass it), and the tensors left as the plain computation gave them must still pass.
TEST_P(GoldenBf16Rule, AResultFourTimesAsFarAsThePlainComputationFails) {
  constexpr double kFarOff = 4;  // > kPlainErrorFactor + floor / plain error wherever plain error > floor / 2
  std::vector<LossHeadResult<double>> plain;
  for (std::size_t b = 0; b < problems_->device.size(); ++b) {
    plain.push_back(
        hybrid_loss_bf16_emulation(tracker_, problems_->options, problems_->device[b], &problems_->exact[b]).result);
  }
  GoldenResults results = loss_head_golden_results(plain, problems_->device.front().weight_sum);
  const std::vector<std::string> moved = {"output/loss", "output/lse", "output/token_loss"};
  for (const std::string& name : moved) {
    const std::vector<double>& golden = golden_->results.at(name).values;
    std::vector<double>& values = results.at(name).values;
    for (std::size_t k = 0; k < values.size(); ++k) values[k] = golden[k] + kFarOff * (values[k] - golden[k]);
  }
  for (const GoldenCheckRow& row : compare_golden_outputs(*golden_, held_to_the_rule(results))) {
    const bool is_moved = std::find(moved.begin(), moved.end(), row.tensor) != moved.end();
    EXPECT_EQ(row.passed(), !is_moved) << row.tensor << " " << row.error << " vs " << row.tolerance;
  }
}

TEST_P(GoldenBf16Rule, AnLseOffByThreeTimesItsToleranceFailsOnLseAlone) {
  GoldenResults results = reference_loss_head_results(tracker_, *golden_);
  // Move one lse entry by 3 x its tolerance (relative to the check's denominator): only lse fails.
  const std::vector<double>& golden_lse = golden_->results.at("output/lse").values;
  double scale = golden_loss_magnitude(*golden_);
  for (double v : golden_lse) scale = std::max(scale, std::abs(v));
  results["output/lse"].values[0] = golden_lse[0] + 3 * tolerance_.at("output/lse") * scale;
  for (const GoldenCheckRow& row : compare_golden_outputs(*golden_, held_to_the_rule(results))) {
    EXPECT_EQ(row.passed(), row.tensor != "output/lse") << row.tensor;
  }
}

// Accuracy is a count of rows: its tolerance, on the check's measure (relative to the golden's
// accuracy), must convert to a whole number k of rows, and an accuracy k rows off passes while one
// k + 1 rows off fails.
TEST_P(GoldenBf16Rule, TheAccuracyToleranceIsAWholeNumberOfRows) {
  std::int64_t valid_rows = 0;
  for (std::size_t b = 0; b < problems_->device.size(); ++b) {
    valid_rows += hybrid_loss_bf16_emulation(tracker_, problems_->options, problems_->device[b], &problems_->exact[b])
                      .result.stats.valid_rows;
  }
  ASSERT_GT(valid_rows, 0);
  const double accuracy = golden_->results.at("output/accuracy").values.at(0);
  if (accuracy == 0) {  // no relative measure: any change is allowed (an ambiguous row) or none
    EXPECT_TRUE(tolerance_.at("output/accuracy") == 0 || std::isinf(tolerance_.at("output/accuracy")));
    return;
  }
  const double rows = tolerance_.at("output/accuracy") * accuracy * double(valid_rows);
  const double k = std::round(rows);
  EXPECT_NEAR(rows, k, 1e-9) << "the tolerance is not a whole number of rows";
  const double correct = std::round(accuracy * double(valid_rows));
  int compared = 0;
  for (const auto& [off, passes] : {std::pair{k, true}, std::pair{k + 1, false}}) {
    // Off downwards where the golden has that many correct rows, else upwards.
    const double moved = correct >= off ? correct - off : correct + off;
    if (moved > double(valid_rows)) continue;
    GoldenResults results = reference_loss_head_results(tracker_, *golden_);
    results["output/accuracy"].values.at(0) = moved / double(valid_rows);
    for (const GoldenCheckRow& row : compare_golden_outputs(*golden_, held_to_the_rule(results))) {
      if (row.tensor == "output/accuracy") {
        EXPECT_EQ(row.passed(), passes) << off << " rows off";
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 1);  // at least the k rows off case (k + 1 may not fit in the set)
}

INSTANTIATE_TEST_SUITE_P(CommittedGoldens, GoldenBf16Rule, ::testing::ValuesIn(golden_files_in(default_golden_dir())),
                         [](const ::testing::TestParamInfo<std::filesystem::path>& info) {
                           std::string name = info.param.stem().string();
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace dflash
