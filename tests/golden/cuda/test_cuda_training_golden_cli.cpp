// `dflash golden check-training --impl cuda` as a user runs it on a machine without a usable GPU:
// listed in --help, SKIPPED with the reason and exit 0 (no table, no PASS), exit 1 naming the
// reason under DFLASH_REQUIRE_GPU=1 — as `golden check --impl cuda`. Where a GPU is usable this
// test skips: test_cuda_training_golden_gpu checks the implementation itself.
#include <cstdlib>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cuda/runtime/device_probe.hpp"
#include "tests/support/cli_run.hpp"

namespace dflash {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(CheckTrainingCli, ListsTheCudaImplementation) {
  const testing_support::CliRun r = testing_support::run_dflash("golden check-training --help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("{reference,cuda}"));
  EXPECT_THAT(r.out, HasSubstr("cuda: the CUDA training step on one GPU"));
}

class CheckTrainingWithoutGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_status().available)
      GTEST_SKIP() << "a GPU is usable here: test_cuda_training_golden_gpu runs the check";
  }
  void TearDown() override { unsetenv("DFLASH_REQUIRE_GPU"); }
};

TEST_F(CheckTrainingWithoutGpu, SaysSkippedWithTheReasonAndChecksNothing) {
  unsetenv("DFLASH_REQUIRE_GPU");
  const testing_support::CliRun r = testing_support::run_dflash("golden check-training --impl cuda");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("dflash golden check-training: SKIPPED (no golden checked): --impl cuda needs a GPU: " +
                               cuda_device_status().reason));
  EXPECT_THAT(r.out, Not(HasSubstr("PASS")));
}

TEST_F(CheckTrainingWithoutGpu, FailsNamingTheReasonWhereAGpuIsRequired) {
  setenv("DFLASH_REQUIRE_GPU", "1", 1);
  const testing_support::CliRun r = testing_support::run_dflash("golden check-training --impl cuda");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("DFLASH_REQUIRE_GPU=1, but --impl cuda has no GPU: " + cuda_device_status().reason));
  EXPECT_THAT(r.out, Not(HasSubstr("PASS")));
}

}  // namespace
}  // namespace dflash
