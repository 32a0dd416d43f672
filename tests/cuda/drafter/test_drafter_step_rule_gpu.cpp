// The whole CUDA step (cuda_drafter_step) against the double reference step under SPEC §10's
// bf16 rule, on the tiny and mid configs with dropout off and on: the losses, every parameter's
// gradient and dL/dF within 2 x the plain bf16 computation's error + the fp32 floor
// (harness/cuda/drafter_step_twin.hpp), under every trunk policy x loss policy; the trunk policies
// bitwise equal for each loss policy, the two chunked loss policies bitwise equal, and a second
// run bitwise equal to the first. Skipped, with the reason, without a GPU.
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cuda/drafter/step.hpp"
#include "harness/cuda/config_path.hpp"
#include "harness/cuda/drafter_step_twin.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "reference/compare.hpp"
#include "reference/drafter_problem.hpp"

namespace dflash {
namespace {

std::string case_name(const StepProblemCase& c) {
  return std::string(c.config) + (c.dropout > 0 ? " dropout" : " no dropout") +
         (c.attention_dropout >= 0 ? " attention apart" : "");
}

void expect_step_within_rule(const DrafterParameters<double>& params, const StepValues& got, const StepValues& plain,
                             const StepValues& exact) {
  for (const RuleLine& l : step_rule_lines(params, got, plain, exact)) {
    EXPECT_LE(l.error, l.bound) << l.name << ": error " << l.error << ", plain " << l.plain_error;
    std::printf("  %-28s error %.2e  plain %.2e  bound %.2e\n", l.name.c_str(), l.error, l.plain_error, l.bound);
  }
}

void expect_bitwise(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t e = 0; e < got.size(); ++e) ASSERT_TRUE(same_bits(got[e], want[e])) << what << ": value " << e;
}

class DrafterStepRule : public GpuTest, public ::testing::WithParamInterface<StepProblemCase> {};

TEST_P(DrafterStepRule, EveryPolicyWithinBf16RuleAndBitwiseEqual) {
  const StepProblemCase& c = GetParam();
  DeviceFormatStepProblem p(load_drafter_config(test_config_file(c.config)), c);
  const auto reference_options = p.options(TrunkPolicy::per_layer, LossPolicy::chunk_recompute);
  const StepValues exact =
      step_values(drafter_step(p.tracker, p.config, p.params, p.frozen, p.batch, reference_options));
  ASSERT_GT(exact.valid_rows, 0) << "no labelled row: the problem tests nothing";
  const StepValues plain = plain_bf16_drafter_step(p.config, p.params, p.frozen, p.batch, reference_options);

  std::vector<double> chunked;
  for (const LossPolicy loss :
       {LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward, LossPolicy::materialize}) {
    std::vector<double> first;
    for (const TrunkPolicy trunk : kAllTrunkPolicies) {
      SCOPED_TRACE(std::string(trunk_policy_name(trunk)) + " x " + std::string(loss_policy_name(loss)));
      const StepValues got = step_values(
          cuda_drafter_step(allocator(), p.tracker, p.config, p.params, p.frozen, p.batch, p.options(trunk, loss)));
      expect_step_within_rule(p.params, got, plain, exact);
      const std::vector<double> bits = flattened(got);
      if (first.empty()) {
        first = bits;
      } else {
        expect_bitwise(bits, first, "trunk policies");
      }
    }
    if (loss == LossPolicy::materialize) continue;
    if (chunked.empty()) {
      chunked = first;
    } else {
      expect_bitwise(first, chunked, "chunk_recompute vs chunk_grad_in_forward");
    }
  }
  const StepValues again = step_values(cuda_drafter_step(allocator(), p.tracker, p.config, p.params, p.frozen, p.batch,
                                                         p.options(TrunkPolicy::none, LossPolicy::chunk_recompute)));
  expect_bitwise(flattened(again), chunked, "a second run");
}

// mid: 4 anchor slots (T = 64), S = 300 (its sliding window, 256, binds), chunks of 24 rows (3
// chunks); tiny: S = 11, the config's 4 slots and 5-row chunks. Two sequences each.
INSTANTIATE_TEST_SUITE_P(TinyAndMid, DrafterStepRule,
                         ::testing::Values(StepProblemCase{"tiny.json", 11, 4, 5, 0.0},
                                           StepProblemCase{"tiny.json", 11, 4, 5, 0.1},
                                           StepProblemCase{"tiny.json", 11, 4, 5, 0.1, 0.3},
                                           StepProblemCase{"mid.json", 300, 4, 24, 0.0},
                                           StepProblemCase{"mid.json", 300, 4, 24, 0.1}),
                         [](const ::testing::TestParamInfo<StepProblemCase>& info) {
                           std::string n = case_name(info.param);
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace dflash
