// The harness the GPU step is judged by, on the CPU (every CI): the plain bf16 computation of the
// whole step (harness/cuda/drafter_step_twin.hpp) on the tiny and mid configs, dropout off and on
// (and on tiny with the attention site's rate apart from the hidden sites', so that a rate read
// from the other site shows),
// against the double reference step on the same device-format inputs. Each quantity must be off
// by no more than SPEC §10's model bound of a plain bf16 step (step_result_bound,
// golden/compare_rules.hpp: independent bf16 roundings along the step's path) and must be
// off at all (the twin really rounds). A twin that drew other dropout coordinates, skipped a
// sequence or mis-bound a parameter is off by O(1) and fails.
// Its includes bring reference/linalg.hpp in before cuda/attention/simt_program.hpp, as a TU of the
// reference's users does: where the attention programs called dot() unqualified, the reference's
// dot<Real> captured the bf16 calls and summed raw bits as integers (scores and delta); this test
// failed then (every gradient off by 100 %), which the programs' own tests could not see.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "golden/compare_rules.hpp"
#include "harness/cuda/config_path.hpp"
#include "harness/cuda/drafter_step_twin.hpp"
#include "reference/drafter_problem.hpp"

namespace dflash {
namespace {

class PlainBf16Step : public ::testing::TestWithParam<StepProblemCase> {};

TEST_P(PlainBf16Step, WithinTheModelBoundOfTheReferenceAndNotExact) {
  const StepProblemCase c = GetParam();
  DeviceFormatStepProblem p(load_drafter_config(test_config_file(c.config)), c);
  const DrafterStepOptions o = p.options(TrunkPolicy::per_layer, LossPolicy::chunk_recompute);
  const StepValues exact = step_values(drafter_step(p.tracker, p.config, p.params, p.frozen, p.batch, o));
  const StepValues plain = plain_bf16_drafter_step(p.config, p.params, p.frozen, p.batch, o);
  ASSERT_GT(exact.valid_rows, 0);

  const std::int64_t T = c.max_anchors * p.config.block_size;
  const double bound = step_result_bound(CompareRule::bf16, p.config, 2, c.context_length, T);
  for (const RuleLine& l : step_rule_lines(p.params, plain, plain, exact)) {
    if (l.name == "valid rows") {
      EXPECT_EQ(l.error, 0) << "the labelled rows differ";
      continue;
    }
    std::printf("  %-28s plain bf16 error %.2e (model bound %.2e)\n", l.name.c_str(), l.plain_error, bound);
    EXPECT_LE(l.plain_error, bound) << l.name;
    EXPECT_GT(l.plain_error, 0) << l.name << ": the plain computation is exact; it rounds nothing";
  }
}

INSTANTIATE_TEST_SUITE_P(TinyAndMid, PlainBf16Step,
                         ::testing::Values(StepProblemCase{"tiny.json", 11, 4, 5, 0.0},
                                           StepProblemCase{"tiny.json", 11, 4, 5, 0.1},
                                           StepProblemCase{"tiny.json", 11, 4, 5, 0.1, 0.3},
                                           StepProblemCase{"mid.json", 300, 4, 24, 0.1}),
                         [](const ::testing::TestParamInfo<StepProblemCase>& info) {
                           return std::string(info.param.config[0] == 't' ? "tiny" : "mid") +
                                  (info.param.dropout > 0 ? "_dropout" : "") +
                                  (info.param.attention_dropout >= 0 ? "_attention_apart" : "");
                         });

}  // namespace
}  // namespace dflash
