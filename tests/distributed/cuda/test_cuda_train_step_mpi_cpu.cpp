// The CUDA training step's orchestration on R CPU ranks: the rank cases test_cuda_train_step_nccl_gpu
// runs over NCCL (train_step_cases.hpp), here on the CPU's training backend
// (harness/cuda/host_training_backend.hpp) with MPI moving both the host scalars and the flat
// vectors, R = 1, 2 and 4 in one job of 4 processes, ZeRO-0 and ZeRO-1. What only several ranks
// exercise runs here before any GPU runs it: the shard offsets of the reduce-scatter, the norm's
// sum over shards, the update of a shard that starts past 0, the all-gather of the master, and
// buckets summed while the backward goes on.
#include <gtest/gtest.h>

#include "distributed/single_process_communicator.hpp"
#include "harness/cuda/host_training_backend.hpp"
#include "harness/mpi_world.hpp"
#include "tests/distributed/cuda/host_step_support.hpp"
#include "tests/distributed/cuda/train_step_cases.hpp"

namespace dflash::testing {
namespace {

struct RankCase {
  int ranks, zero;
};

// Ranks [0, R) of the world in one communicator (every world rank takes part in the split); the
// others sit the case out.
class RanksOfTheWorld {
 protected:
  void join(int ranks) {
    sub_ = MpiCommunicator::split(world().rank() < ranks ? 0 : 1);
    active_ = world().rank() < ranks;
  }
  std::unique_ptr<MpiCommunicator> sub_;
  bool active_ = false;
  MemoryTracker memory_;
};

class CudaTrainStepRanks : public ::testing::TestWithParam<RankCase>, protected RanksOfTheWorld {
 protected:
  void SetUp() override { join(GetParam().ranks); }
};

// ZeRO-0 alone: ZeRO-1 reduce-scatters after the backward (bucket_reduction.hpp).
class CudaTrainStepBuckets : public ::testing::TestWithParam<int>, protected RanksOfTheWorld {
 protected:
  void SetUp() override { join(GetParam()); }
};

TEST_P(CudaTrainStepRanks, StepsFollowTheRuleOfEachPart) {
  if (!active_) return;
  expect_steps_follow_the_rule_of_each_part(HostTrainingBackend{memory_}, {*sub_, *sub_}, GetParam().zero,
                                            host_step_gradient);
}

TEST_P(CudaTrainStepRanks, EqualsTheSingleProcessStep) {
  if (!active_) return;
  SingleProcessCommunicator single;
  expect_ranks_equal_the_single_process_step(HostTrainingBackend{memory_}, {*sub_, *sub_}, single, GetParam().zero);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CudaTrainStepRanks,
                         ::testing::Values(RankCase{1, 0}, RankCase{1, 1}, RankCase{2, 0}, RankCase{2, 1},
                                           RankCase{4, 0}, RankCase{4, 1}),
                         [](const auto& info) {
                           return "R" + std::to_string(info.param.ranks) + "ZeRO" + std::to_string(info.param.zero);
                         });

TEST_P(CudaTrainStepRanks, NonFiniteOnOneRankStopsEveryRankWithNothingApplied) {
  if (!active_) return;
  expect_non_finite_on_one_rank_stops_every_rank(HostTrainingBackend{memory_}, {*sub_, *sub_}, GetParam().zero);
}

TEST_P(CudaTrainStepBuckets, DuringTheBackwardEqualBucketsAfterIt) {
  if (!active_) return;
  expect_buckets_during_the_backward_equal_buckets_after_it(HostTrainingBackend{memory_}, {*sub_, *sub_});
}

INSTANTIATE_TEST_SUITE_P(Ranks, CudaTrainStepBuckets, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return "R" + std::to_string(info.param); });

}  // namespace
}  // namespace dflash::testing
