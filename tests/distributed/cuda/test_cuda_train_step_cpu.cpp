// The CUDA training step's orchestration (distributed/cuda/train_step_loop.hpp) and resident state
// on the CPU's training backend (harness/cuda/host_training_backend.hpp), one rank with the
// single-process communicator: the cases test_cuda_train_step_gpu runs on the GPU
// (train_step_cases.hpp), here in every CI run. The drafter step the gradient is held to is
// host_drafter_step: the device step's own code on the CPU backends.
#include <gtest/gtest.h>

#include "distributed/single_process_communicator.hpp"
#include "harness/cuda/host_training_backend.hpp"
#include "tests/distributed/cuda/host_step_support.hpp"
#include "tests/distributed/cuda/train_step_cases.hpp"

namespace dflash::testing {
namespace {

class CudaTrainStepCpu : public ::testing::Test {
 protected:
  SingleProcessCommunicator comm_;
  MemoryTracker memory_;
  HostTrainingBackend backend() { return HostTrainingBackend{memory_}; }
};

TEST_F(CudaTrainStepCpu, ThreeStepsOnTinyFollowTheRuleOfEachPart) {
  for (const int zero : {0, 1}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(zero));
    expect_steps_follow_the_rule_of_each_part(backend(), {comm_, comm_}, zero, host_step_gradient);
  }
}

TEST_F(CudaTrainStepCpu, BlockHitsAreTheLossHeadsAndAgreeWithTheReference) {
  expect_block_hits_of_the_loss_head(backend(), comm_);
}

TEST_F(CudaTrainStepCpu, ZeroOneIsZeroZeroBitwiseOnOneRank) {
  expect_zero_one_is_zero_zero_on_one_rank(backend(), comm_);
}

TEST_F(CudaTrainStepCpu, HostStateRoundTripsAndTheWorkingCopyIsTheRoundedMaster) {
  expect_host_state_round_trip(backend(), comm_);
}

TEST_F(CudaTrainStepCpu, StateMemoryPerCategoryIsThePlansWithZeroOne) {
  expect_state_memory_is_the_plans(backend(), memory_, comm_);
}

TEST_F(CudaTrainStepCpu, BucketsDuringTheBackwardEqualBucketsAfterIt) {
  expect_buckets_during_the_backward_equal_buckets_after_it(backend(), {comm_, comm_});
}

}  // namespace
}  // namespace dflash::testing
