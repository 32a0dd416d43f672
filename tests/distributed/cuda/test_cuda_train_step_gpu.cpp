// The CUDA training step (distributed/cuda/train_step.hpp) on one GPU, R = 1 with the
// single-process communicator, on the tiny problem (dropout on, clipping active), three steps: the
// cases of train_step_cases.hpp on CudaTrainingBackend (test_cuda_train_step_cpu runs them on the
// CPU's backend in CI). What they hold it to, and why (SPEC §10):
//   - the optimizer, under the fp32 rule: each step's update of the fp32 master weights and
//     moments equals a double AdamW written from §12 (tests/cuda/optimizer/test_support.hpp,
//     within adamw_fp32_bound) applied to the step's own summed gradient, with the clip factor of
//     its norm; the norm bitwise the host program of the same tree;
//   - the gradient, bitwise: the step's flat gradient equals cuda_drafter_step's on the working
//     copy with the global W (one implementation: a view, zeroing or W mistake shows), ZeRO-0 and 1. That step
//     against the double reference is the bf16 rule's business (test_drafter_step_gpu); the plain
//     bf16 computation of a whole training run, which a comparison of final parameters with the
//     reference's would need, is not built (cuda/README.md);
//   - what precision cannot change, exactly against the reference train_step: W, tokens, lr, step;
//   - the per-row argmax hits behind the block statistics: the loss head's own (they count its
//     accuracy), on the reference's rows, equal to the reference's on at least kHitAgreement;
//   - ZeRO-1 bitwise ZeRO-0 on one rank; the host OptimizerState round trip; device memory of
//     the state per category equal to the plan (the layout `dflash train --backend cuda` plans),
//     and of the step (gradients without dL/dF, inputs, saved, outputs) equal to it;
//   - the run's cuBLAS handles made once, with the backend, and used by every step: a step makes
//     and destroys none (cublasDestroy synchronizes the device: cuda/drafter/gemms.hpp).
// Skipped with the reason without a GPU (failed under DFLASH_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include "distributed/cuda/train_step.hpp"
#include "distributed/single_process_communicator.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "tests/distributed/cuda/train_step_cases.hpp"

namespace dflash::testing {
namespace {

class CudaTrainStep : public GpuTest {
 protected:
  SingleProcessCommunicator comm_;
  CudaTrainingBackend backend() { return CudaTrainingBackend{{allocator()}}; }
  // cuda_drafter_step on the working copy with the global W.
  DrafterStepOn drafter_step() {
    return [this](MemoryTracker& host, const DrafterConfig& config, const DrafterParameters<double>& working,
                  const FrozenWeights<double>& frozen, const DrafterBatch<double>& batch,
                  const DrafterStepOptions& options, double W) {
      const CudaDrafterStepResult r = cuda_drafter_step(allocator(), host, config, working, frozen, batch, options, W);
      return DrafterStepGradient{flat_floats(r.grads), r.stats};
    };
  }
};

TEST_F(CudaTrainStep, ThreeStepsOnTinyFollowTheRuleOfEachPart) {
  for (const int zero : {0, 1}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(zero));
    expect_steps_follow_the_rule_of_each_part(backend(), {comm_, comm_}, zero, drafter_step());
  }
}

TEST_F(CudaTrainStep, BlockHitsAreTheLossHeadsAndAgreeWithTheReference) {
  expect_block_hits_of_the_loss_head(backend(), comm_);
}

TEST_F(CudaTrainStep, ZeroOneIsZeroZeroBitwiseOnOneRank) { expect_zero_one_is_zero_zero_on_one_rank(backend(), comm_); }

TEST_F(CudaTrainStep, Bf16FeaturesAreTheDoublesRoundedBitwise) {
  expect_bf16_features_are_the_doubles_rounded(backend(), comm_);
}

TEST_F(CudaTrainStep, HostStateRoundTripsAndTheWorkingCopyIsTheRoundedMaster) {
  expect_host_state_round_trip(backend(), comm_);
}

TEST_F(CudaTrainStep, FrozenWeightsAreUploadedAPieceAtATime) {
  expect_frozen_weights_uploaded_a_piece_at_a_time(backend(), allocator().tracker());
}

TEST_F(CudaTrainStep, StateMemoryPerCategoryIsThePlansWithZeroOne) {
  expect_state_memory_is_the_plans(backend(), allocator().tracker(), comm_);
}

// The handles' workspaces are allocated with the backend and stay; within two steps of a ZeRO-0
// state the transient peak above what the backend and the state hold stays under one workspace
// (32 MiB; the tiny step's own scratch is a few KiB), so no step made a handle of its own.
TEST_F(CudaTrainStep, CublasHandlesAreTheRunsNotTheSteps) {
  const MemoryTracker& memory = allocator().tracker();
  const std::size_t before = memory.current(MemoryCategory::transient);
  const CudaTrainingBackend be = backend();
  ASSERT_EQ(memory.current(MemoryCategory::transient), before + CudaDrafterGemms::workspace_bytes());

  CudaTinyProblem p(0);
  DeviceTrainingState<CudaTrainingBackend> state(be, {comm_, comm_}, p.config, p.training, p.frozen,
                                                 p.initial_state(1, 0));
  EXPECT_EQ(state.backend().gemms.get(), be.gemms.get()) << "the state's copy of the backend has handles of its own";
  const std::size_t held = memory.current(MemoryCategory::transient);  // and the state's decay table
  allocator().reset_peaks();
  MemoryTracker host;
  for (std::int64_t t = 0; t < 2; ++t) {
    const DrafterBatch<double> batch = p.global_batch(t);
    const RankSequences mine{0, &batch};
    train_step_on(host, state, p.config, p.training, {&mine, 1});
  }
  EXPECT_EQ(memory.current(MemoryCategory::transient), held) << "the run's workspaces did not outlive the steps";
  EXPECT_LT(memory.peak(MemoryCategory::transient) - held, CublasGemm::kDefaultWorkspaceBytes)
      << "a step made a cuBLAS workspace (and handle) of its own";
}

}  // namespace
}  // namespace dflash::testing
