// Held-out evaluation (`--eval-data`) on the CUDA step's code on the CPU: the cases of
// evaluation_cases.hpp (test_cuda_evaluation runs them on the GPU) with DeviceStepBackend over the
// CPU's training backend, tiny and mid: the forward alone on the resident bf16 working copy within
// the bf16 rule of the double reference, no gradient made, memory within the plan.
#include <gtest/gtest.h>

#include "distributed/run/device_step_backend.hpp"
#include "harness/cuda/host_training_backend.hpp"
#include "tests/distributed/cuda/evaluation_cases.hpp"

namespace dflash::testing {
namespace {

class CudaEvaluationCpu : public ::testing::TestWithParam<EvalCase> {};

TEST_P(CudaEvaluationCpu, MatchesTheReferenceWithinTheBf16Rule) {
  MemoryTracker memory;
  const MakeStepBackend make = [&memory](Communicator& comm, const DrafterConfig& config,
                                         const TrainingConfig& training, const FrozenWeightSource& frozen,
                                         TrainingState state) -> std::unique_ptr<StepBackend> {
    return std::make_unique<DeviceStepBackend<HostTrainingBackend>>(
        HostTrainingBackend{memory}, CudaCommunicators{comm, comm}, config, training, frozen, state.optimizer);
  };
  expect_evaluation_within_the_bf16_rule(GetParam(), make, 0);
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaEvaluationCpu, ::testing::ValuesIn(kEvalCases),
                         [](const auto& info) { return eval_case_name(info.param); });

}  // namespace
}  // namespace dflash::testing
