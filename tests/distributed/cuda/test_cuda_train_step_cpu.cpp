// The CUDA training step's orchestration (distributed/cuda/train_step_loop.hpp) and resident state
// on the CPU's training backend (harness/cuda/host_training_backend.hpp), one rank with the
// single-process communicator: the cases test_cuda_train_step_gpu runs on the GPU
// (train_step_cases.hpp), here in every CI run. The drafter step the gradient is held to is
// host_drafter_step: the device step's own code on the CPU backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

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

TEST_F(CudaTrainStepCpu, Bf16FeaturesAreTheDoublesRoundedBitwise) {
  expect_bf16_features_are_the_doubles_rounded(backend(), comm_);
}

TEST_F(CudaTrainStepCpu, HostStateRoundTripsAndTheWorkingCopyIsTheRoundedMaster) {
  expect_host_state_round_trip(backend(), comm_);
}

TEST_F(CudaTrainStepCpu, StateMemoryPerCategoryIsThePlansWithZeroOne) {
  expect_state_memory_is_the_plans(backend(), memory_, comm_);
}

TEST_F(CudaTrainStepCpu, FrozenWeightsAreUploadedAPieceAtATime) {
  expect_frozen_weights_uploaded_a_piece_at_a_time(backend(), memory_);
}

TEST_F(CudaTrainStepCpu, BucketsDuringTheBackwardEqualBucketsAfterIt) {
  expect_buckets_during_the_backward_equal_buckets_after_it(backend(), {comm_, comm_});
}

TEST_F(CudaTrainStepCpu, ABucketSumFailedInFlightFailsTheStep) {
  expect_a_bucket_sum_failed_in_flight_fails_the_step(backend(), {comm_, comm_});
}

// The CPU backend holds a kernel to the extents its contract names (the GPU would overrun the
// buffer silently): the norm's partials hold kNormMaxBlocks values, the gradient n.
TEST_F(CudaTrainStepCpu, TheBackendRefusesAKernelExtentBeyondItsBuffer) {
  const HostTrainingBackend be = backend();
  auto g = be.buffer<float>(MemoryCategory::gradients, 1000);
  auto out = be.buffer<double>(MemoryCategory::transient, 1);
  auto partials = be.buffer<double>(MemoryCategory::transient, std::size_t(kNormMaxBlocks));
  auto short_partials = be.buffer<double>(MemoryCategory::transient, std::size_t(kOptimizerThreads));
  g.zero();
  EXPECT_NO_THROW(be.squared_norm(g.data(), 1000, partials.data(), out.data()));
  EXPECT_THROW(be.squared_norm(g.data(), 1000, short_partials.data(), out.data()), std::logic_error);
  EXPECT_THROW(be.squared_norm(g.data() + 1, 1000, partials.data(), out.data()), std::logic_error);
  be.synchronize();
}

// §12's report names the tensor and element that hold the non-finite value, found by downloading
// the first tensor whose squared norm is not finite: here one element deep inside a later tensor
// (the step's own test poisons every gradient, where the first tensor is the answer whatever the
// search reads).
TEST_F(CudaTrainStepCpu, NonFiniteSearchNamesTheTensorAndTheElement) {
  CudaTinyProblem p(0);
  DeviceTrainingState<HostTrainingBackend> state(backend(), {comm_, comm_}, p.config, p.training, p.frozen,
                                                 p.initial_state(1, 0));
  const std::vector<FlatTensor>& tensors = state.layout().tensors();
  ASSERT_GE(tensors.size(), 3u);
  const std::size_t t = tensors.size() - 2;
  const std::int64_t e = tensors[t].numel - 2;
  std::fill_n(state.gradient(), state.layout().count(), 0.0f);
  state.gradient()[tensors[t].offset + e] = std::numeric_limits<float>::infinity();
  std::vector<double> squares(tensors.size(), 0.0);
  squares[t] = std::numeric_limits<double>::infinity();
  const NonFiniteReport found = train_step_detail::find_non_finite(state, squares.data(), 1.0);
  EXPECT_EQ(found.kind, 2);
  EXPECT_EQ(found.tensor, std::int64_t(t));
  EXPECT_EQ(found.element, e);
  // a finite gradient with a non-finite loss is the loss's
  state.gradient()[tensors[t].offset + e] = 0.0f;
  squares[t] = 0.0;
  EXPECT_EQ(train_step_detail::find_non_finite(state, squares.data(), std::nan("")).kind, 1);
}

}  // namespace
}  // namespace dflash::testing
