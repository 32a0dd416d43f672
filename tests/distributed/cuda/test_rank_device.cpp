// Which GPU a rank of a CUDA run uses (distributed/cuda/rank_device.hpp), for the launchers that
// start one: every GPU visible to every rank (mpirun), or one GPU per rank (srun --gpus-per-task=1).
#include <gtest/gtest.h>

#include "distributed/cuda/rank_device.hpp"

namespace dflash {
namespace {

TEST(RankDevice, EveryGpuVisibleTakesTheNodeLocalRank) {
  for (int local = 0; local < 8; ++local) EXPECT_EQ(rank_device(local, 8), local);
  EXPECT_EQ(rank_device(3, 4), 3);
}

TEST(RankDevice, OneVisibleGpuIsTheRanksOwn) {
  for (int local = 0; local < 8; ++local) EXPECT_EQ(rank_device(local, 1), 0) << "node-local rank " << local;
}

TEST(RankDevice, MoreRanksThanVisibleGpusAreRefused) {
  EXPECT_EQ(rank_device(2, 2), std::nullopt);
  EXPECT_EQ(rank_device(8, 8), std::nullopt);
  EXPECT_EQ(rank_device(0, 0), std::nullopt);  // no GPU at all
  EXPECT_EQ(rank_device(-1, 4), std::nullopt);
}

}  // namespace
}  // namespace dflash
