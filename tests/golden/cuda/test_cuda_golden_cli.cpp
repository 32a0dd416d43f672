// `dflash golden check --impl cuda-loss-head|cuda` as a user runs them on a machine without a
// usable GPU: SKIPPED with the reason and exit 0 (neither passed nor failed: no table, no PASS),
// and exit 1 naming the reason under DFLASH_REQUIRE_GPU=1. Where a GPU is usable this test skips:
// test_cuda_golden_gpu checks the implementations themselves.
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

class GoldenCheckWithoutGpu : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (cuda_device_status().available) GTEST_SKIP() << "a GPU is usable here: test_cuda_golden_gpu runs the check";
  }
  void TearDown() override { unsetenv("DFLASH_REQUIRE_GPU"); }
};

TEST_P(GoldenCheckWithoutGpu, SaysSkippedWithTheReasonAndChecksNothing) {
  unsetenv("DFLASH_REQUIRE_GPU");
  const testing_support::CliRun r = testing_support::run_dflash(std::string("golden check --impl ") + GetParam());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(std::string("SKIPPED (no golden checked): --impl ") + GetParam() + " needs a GPU: "));
  EXPECT_THAT(r.out, HasSubstr(cuda_device_status().reason));
  EXPECT_THAT(r.out, Not(HasSubstr("PASS")));
}

TEST_P(GoldenCheckWithoutGpu, FailsNamingTheReasonWhereAGpuIsRequired) {
  setenv("DFLASH_REQUIRE_GPU", "1", 1);
  const testing_support::CliRun r = testing_support::run_dflash(std::string("golden check --impl ") + GetParam());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("DFLASH_REQUIRE_GPU=1, but --impl " + std::string(GetParam()) +
                               " has no GPU: " + cuda_device_status().reason));
  EXPECT_THAT(r.out, Not(HasSubstr("PASS")));
}

INSTANTIATE_TEST_SUITE_P(BothCudaImplementations, GoldenCheckWithoutGpu, ::testing::Values("cuda-loss-head", "cuda"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param) == "cuda" ? std::string("cuda")
                                                                    : std::string("cuda_loss_head");
                         });

}  // namespace
}  // namespace dflash
