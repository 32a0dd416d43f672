// `dflash golden check --impl cuda-loss-head` and `--impl cuda` in a test: the CUDA loss head, and
// the whole CUDA step, on every committed golden file pass every tensor under SPEC §10's bf16 rule.
#include <string>

#include <gtest/gtest.h>

#include "golden/cases.hpp"
#include "golden/cuda/loss_head_check.hpp"
#include "golden/cuda/step_check.hpp"
#include "harness/cuda/gpu_test_support.hpp"

namespace dflash {
namespace {

using CudaLossHeadGoldens = GpuTest;

TEST_F(CudaLossHeadGoldens, EveryCommittedGoldenPassesUnderTheBf16Rule) {
  const GoldenImplementation cuda = cuda_loss_head_golden_implementation();
  int files = 0;
  for (const std::filesystem::path& path : golden_files_in(default_golden_dir())) {
    ++files;
    const std::vector<GoldenCheckRow> rows = check_golden_file(path, cuda);
    EXPECT_EQ(rows.size(), 7u) << path;  // loss, ce, kl, accuracy, weight_sum, lse, token_loss
    for (const GoldenCheckRow& row : rows) {
      EXPECT_TRUE(row.passed()) << path << " " << row.tensor << ": " << row.error << " > " << row.tolerance << " "
                                << row.note;
    }
  }
  EXPECT_GT(files, 0);
}

// `dflash golden check --impl cuda`: the whole step on every golden, the losses, accuracy, W and
// every parameter gradient within the bf16 rule (golden/cuda/step_check.hpp).
TEST_F(CudaLossHeadGoldens, TheWholeCudaStepPassesEveryGoldenUnderTheBf16Rule) {
  const GoldenImplementation cuda = cuda_drafter_step_golden_implementation();
  int files = 0;
  for (const std::filesystem::path& path : golden_files_in(default_golden_dir())) {
    ++files;
    const std::vector<GoldenCheckRow> rows = check_golden_file(path, cuda);
    std::size_t grads = 0;
    for (const GoldenCheckRow& row : rows) {
      grads += row.tensor.starts_with("grad/");
      EXPECT_TRUE(row.passed()) << path << " " << row.tensor << ": " << row.error << " > " << row.tolerance << " "
                                << row.note;
    }
    EXPECT_EQ(rows.size(), 5 + grads) << path;  // loss, ce, kl, accuracy, weight_sum and the gradients
    EXPECT_GT(grads, 0u) << path;
  }
  EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace dflash
