// The CUDA training step over NCCL on the ranks mpirun started (one GPU each; one rank in ci/gpu,
// 2, 4 or 8 under `ci/gpu run --stage multi`), ZeRO-0 and ZeRO-1: the rank cases of train_step_cases.hpp on
// CudaTrainingBackend (test_cuda_train_step_mpi_cpu runs them on 1, 2 and 4 CPU ranks in CI):
// against the single-process step on the whole global batch, ZeRO-0's buckets summed during the
// backward bitwise equal to the same buckets after it, each part's rule on R ranks, and a
// non-finite gradient on the last rank stopping every rank with nothing applied.
// Skipped with the reason without a GPU (failed under DFLASH_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>

#include "common/tolerances.hpp"
#include "distributed/cuda/nccl_communicator.hpp"
#include "distributed/cuda/select_rank_device.hpp"
#include "distributed/cuda/train_step.hpp"
#include "distributed/single_process_communicator.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "harness/mpi_world.hpp"
#include "tests/distributed/cuda/train_step_cases.hpp"

namespace dflash::testing {
namespace {

class NcclGpu {
 protected:
  void start() {
    nccl_ = std::make_unique<NcclCommunicator>(world());  // before the allocator: it selects the GPU
    allocator_ = std::make_unique<DeviceAllocator>();
  }
  std::unique_ptr<NcclCommunicator> nccl_;
  std::unique_ptr<DeviceAllocator> allocator_;
};

// Every ZeRO stage. Each rank's GPU is made current before the probe touches a device (which would
// otherwise be GPU 0 for every rank).
class CudaTrainStepNccl : public ::testing::TestWithParam<int>, protected NcclGpu {
 protected:
  void SetUp() override {
    select_rank_device(world().node_local_rank());
    DFLASH_SKIP_WITHOUT_GPU();
    start();
  }
};

// ZeRO-0 alone: ZeRO-1 reduce-scatters after the backward (bucket_reduction.hpp). Not a ZeRO-1 case
// that skips: ci/gpu holds every gpu test that skips on a GPU to be a failure.
class CudaTrainStepNcclBuckets : public ::testing::Test, protected NcclGpu {
 protected:
  void SetUp() override {
    select_rank_device(world().node_local_rank());
    DFLASH_SKIP_WITHOUT_GPU();
    start();
  }
};

TEST_P(CudaTrainStepNccl, EqualsTheSingleProcessStep) {
  const int R = world().size();
  if (kCudaGlobalBatch % R != 0)
    GTEST_SKIP() << "the global batch of " << kCudaGlobalBatch << " needs R to divide it, R = " << R;
  SingleProcessCommunicator single;
  expect_ranks_equal_the_single_process_step(CudaTrainingBackend{{*allocator_}}, {world(), *nccl_}, single, GetParam());
}

// On R >= 2 GPUs (ci/gpu run --stage multi) it also fails if the communication stream does not wait for the
// compute stream's event, or the compute stream for the sums (train_step_cases.hpp says more).
TEST_F(CudaTrainStepNcclBuckets, BucketsDuringTheBackwardEqualBucketsAfterIt) {
  const int R = world().size();
  if (kCudaGlobalBatch % R != 0)
    GTEST_SKIP() << "the global batch of " << kCudaGlobalBatch << " needs R to divide it, R = " << R;
  expect_buckets_during_the_backward_equal_buckets_after_it(CudaTrainingBackend{{*allocator_}}, {world(), *nccl_});
}

TEST_P(CudaTrainStepNccl, NonFiniteOnOneRankStopsEveryRankWithNothingApplied) {
  expect_non_finite_on_one_rank_stops_every_rank(CudaTrainingBackend{{*allocator_}}, {world(), *nccl_}, GetParam());
}

TEST_P(CudaTrainStepNccl, StepsFollowTheRuleOfEachPart) {
  const int R = world().size();
  if (kCudaGlobalBatch % R != 0)
    GTEST_SKIP() << "the global batch of " << kCudaGlobalBatch << " needs R to divide it, R = " << R;
  DeviceAllocator& a = *allocator_;
  const DrafterStepOn drafter_step = [&a](MemoryTracker& host, const DrafterConfig& config,
                                          const DrafterParameters<double>& working, const FrozenWeights<double>& frozen,
                                          const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                          double W) {
    const CudaDrafterStepResult r = cuda_drafter_step(a, host, config, working, frozen, batch, options, W);
    return DrafterStepGradient{flat_floats(r.grads), r.stats};
  };
  expect_steps_follow_the_rule_of_each_part(CudaTrainingBackend{{a}}, {world(), *nccl_}, GetParam(), drafter_step);
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, CudaTrainStepNccl, ::testing::Values(0, 1),
                         [](const auto& info) { return "ZeRO" + std::to_string(info.param); });

}  // namespace
}  // namespace dflash::testing
