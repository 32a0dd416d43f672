// Bad input to the loss head: each case is rejected with a message naming the argument and the
// offending value, before anything is computed.
#include <cmath>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "reference/loss_head.hpp"
#include "reference/loss_head_problem.hpp"

namespace dflash {
namespace {

using testing::AllOf;
using testing::HasSubstr;

class LossHeadInputs : public testing::Test {
 protected:
  MemoryTracker data;
  LossHeadProblem<double> p = make_loss_head_problem<double>(
      data, {.rows = 6, .hidden = 4, .vocab = 9, .seed = 3, .invalid_fraction = 0.0, .zero_weight_fraction = 0.0});
  LossHeadOptions options;

  // Runs the loss head and returns the error message (or "" if it did not throw).
  std::string error_of(const Tensor<double>& hidden, const LossHeadTargets<double>& targets, double weight_sum) {
    MemoryTracker t;
    try {
      run_loss_head(t, options, hidden, targets, weight_sum);
    } catch (const InputError& e) {
      EXPECT_EQ(t.current_total(), 0u) << "a rejected call must not leave allocations behind";
      return e.what();
    }
    return "";
  }
  std::string error_of() { return error_of(p.hidden, p.targets(), p.weight_sum); }
};

TEST_F(LossHeadInputs, ValidProblemIsAccepted) { EXPECT_EQ(error_of(), ""); }

TEST_F(LossHeadInputs, HiddenWidthMismatchWithLmHead) {
  Tensor<double> wide(data, MemoryCategory::inputs, {6, 5});
  EXPECT_THAT(error_of(wide, p.targets(), p.weight_sum),
              AllOf(HasSubstr("lm_head"), HasSubstr("[9, 4]"), HasSubstr("[9, 5]")));
}

TEST_F(LossHeadInputs, TeacherHiddenShapeMismatch) {
  Tensor<double> short_teacher(data, MemoryCategory::inputs, {5, 4});
  LossHeadTargets<double> t = p.targets();
  t.teacher_hidden = &short_teacher;
  EXPECT_THAT(error_of(p.hidden, t, p.weight_sum), AllOf(HasSubstr("teacher_hidden"), HasSubstr("[5, 4]")));
}

TEST_F(LossHeadInputs, HiddenNotTwoDimensional) {
  Tensor<double> flat(data, MemoryCategory::inputs, {24});
  EXPECT_THAT(error_of(flat, p.targets(), p.weight_sum), AllOf(HasSubstr("hidden"), HasSubstr("[24]")));
}

TEST_F(LossHeadInputs, LabelCountMismatch) {
  LossHeadTargets<double> t = p.targets();
  t.labels = t.labels.first(5);
  EXPECT_THAT(error_of(p.hidden, t, p.weight_sum), AllOf(HasSubstr("labels"), HasSubstr("5 entries")));
}

TEST_F(LossHeadInputs, LabelOutsideVocabulary) {
  p.labels[2] = 9;
  EXPECT_THAT(error_of(), AllOf(HasSubstr("labels[2]"), HasSubstr("9 is outside [0, V = 9)")));
  p.labels[2] = -1;
  EXPECT_THAT(error_of(), HasSubstr("labels[2]: -1"));
}

TEST_F(LossHeadInputs, LabelOnInvalidRowIsNeverRead) {
  p.valid[4] = 0;
  p.weights[4] = 0;
  p.labels[4] = 12345;
  EXPECT_EQ(error_of(p.hidden, p.targets(), sum_weights(std::span<const double>(p.weights))), "");
}

TEST_F(LossHeadInputs, NegativeWeight) {
  p.weights[1] = -0.5;
  EXPECT_THAT(error_of(), AllOf(HasSubstr("weights[1]"), HasSubstr("-0.5")));
}

TEST_F(LossHeadInputs, NonFiniteWeight) {
  p.weights[3] = std::numeric_limits<double>::infinity();
  EXPECT_THAT(error_of(), AllOf(HasSubstr("weights[3]"), HasSubstr("inf")));
  p.weights[3] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(error_of(), AllOf(HasSubstr("weights[3]"), HasSubstr("nan")));
}

TEST_F(LossHeadInputs, WeightOnARowWithoutLabel) {
  p.valid[0] = 0;
  EXPECT_THAT(error_of(), AllOf(HasSubstr("weights[0]"), HasSubstr("valid = 0")));
}

TEST_F(LossHeadInputs, ValidFlagNotBoolean) {
  p.valid[5] = 2;
  EXPECT_THAT(error_of(), AllOf(HasSubstr("valid[5]"), HasSubstr("2 is not 0 or 1")));
}

TEST_F(LossHeadInputs, TemperatureMustBePositive) {
  for (double tau : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    options.temperature = tau;
    EXPECT_THAT(error_of(), AllOf(HasSubstr("temperature"), HasSubstr(str(tau)))) << tau;
  }
}

TEST_F(LossHeadInputs, LossWeightsMustBeNonNegative) {
  options.hard_weight = -0.1;
  EXPECT_THAT(error_of(), AllOf(HasSubstr("hard_weight"), HasSubstr("-0.1")));
  options.hard_weight = 0.85;
  options.soft_weight = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(error_of(), HasSubstr("soft_weight"));
}

TEST_F(LossHeadInputs, ChunkRowsZero) {
  options.chunk_rows = 0;
  EXPECT_THAT(error_of(), AllOf(HasSubstr("loss_chunk_rows"), HasSubstr("0 must be at least 1")));
  options.chunk_rows = -3;
  EXPECT_THAT(error_of(), HasSubstr("loss_chunk_rows: -3"));
}

TEST_F(LossHeadInputs, NonFiniteHiddenState) {
  p.hidden.row(2)[1] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(error_of(), AllOf(HasSubstr("invalid hidden"), HasSubstr("element 9"), HasSubstr("row 2")));
}

TEST_F(LossHeadInputs, NonFiniteLmHead) {
  p.lm_head[7] = -std::numeric_limits<double>::infinity();
  EXPECT_THAT(error_of(), AllOf(HasSubstr("lm_head"), HasSubstr("element 7"), HasSubstr("-inf")));
}

TEST_F(LossHeadInputs, NonFiniteTeacherHiddenOnAValidRow) {
  p.teacher_hidden.row(1)[0] = std::numeric_limits<double>::infinity();
  EXPECT_THAT(error_of(), AllOf(HasSubstr("teacher_hidden"), HasSubstr("row 1")));
}

TEST_F(LossHeadInputs, WeightSumMustCoverPositiveWeights) {
  EXPECT_THAT(error_of(p.hidden, p.targets(), 0.0), AllOf(HasSubstr("weight_sum"), HasSubstr("zero")));
  EXPECT_THAT(error_of(p.hidden, p.targets(), -1.0), AllOf(HasSubstr("weight_sum"), HasSubstr("-1")));
  EXPECT_THAT(error_of(p.hidden, p.targets(), std::numeric_limits<double>::quiet_NaN()), HasSubstr("weight_sum"));
}

TEST(LossPolicyNames, RoundTripAndUnknownNamesAreRejected) {
  for (LossPolicy policy : kAllLossPolicies) EXPECT_EQ(parse_loss_policy(loss_policy_name(policy)), policy);
  try {
    parse_loss_policy("chunked", "--loss-policy");
    FAIL() << "an unknown policy name was accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("--loss-policy"), HasSubstr("'chunked'"), HasSubstr("chunk_recompute")));
  }
}

}  // namespace
}  // namespace dflash
