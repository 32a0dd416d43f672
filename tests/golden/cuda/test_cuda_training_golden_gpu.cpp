// `golden check-training --impl cuda`'s implementation on a GPU: the CUDA training step over the
// committed training golden's three steps (dropout on, clipping active, ZeRO-1, two micro-steps)
// within golden/training_rule.hpp's bound on every final/ and metrics/ tensor. Skipped with
// the reason without a GPU (failed under DFLASH_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include "golden/cuda/training_check.hpp"
#include "harness/cuda/gpu_test_support.hpp"

namespace dflash {
namespace {

TEST(CudaTrainingGolden, EveryTensorOfTheCommittedGoldenIsWithinTheRule) {
  DFLASH_SKIP_WITHOUT_GPU();
  const auto path = default_training_golden_dir() / "tiny-3-steps.safetensors";
  const std::vector<GoldenCheckRow> rows = check_training_golden_file(path, cuda_training_golden_implementation());
  const TrainingGolden golden = read_training_golden(path);
  EXPECT_EQ(rows.size(), golden.results.size());  // every final/ and metrics/ tensor computed
  for (const GoldenCheckRow& r : rows) {
    EXPECT_TRUE(r.passed()) << r.tensor << ": error " << r.error << " > " << r.tolerance << " " << r.note;
  }
}

}  // namespace
}  // namespace dflash
