// Held-out evaluation (`--eval-data`) on the CUDA backend (make_cuda_step_backend): the cases of
// evaluation_cases.hpp on the GPU, tiny and mid; test_cuda_evaluation_cpu runs them on the CPU's
// training backend in CI. Skipped with the reason without a GPU (failed under DFLASH_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include "cuda/drafter/gemms.hpp"
#include "distributed/run/cuda_step_backend.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "tests/distributed/cuda/evaluation_cases.hpp"

namespace dflash::testing {
namespace {

class CudaEvaluation : public GpuTest, public ::testing::WithParamInterface<EvalCase> {};

TEST_P(CudaEvaluation, MatchesTheReferenceWithinTheBf16Rule) {
  // The trunk's and the loss head's cuBLAS workspaces.
  const std::int64_t workspaces = std::int64_t(CudaDrafterGemms::workspace_bytes());
  expect_evaluation_within_the_bf16_rule(GetParam(), make_cuda_step_backend, workspaces);
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaEvaluation, ::testing::ValuesIn(kEvalCases),
                         [](const auto& info) { return eval_case_name(info.param); });

}  // namespace
}  // namespace dflash::testing
