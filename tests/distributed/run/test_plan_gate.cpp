// The plan gate's host verdict (distributed/run/plan_gate.hpp): with backend cuda, the writing
// rank's host peak (planner/host_memory.hpp) against each rank's share of host memory under the
// device rule's headroom, to the byte; none with backend cpu, whose device plan is the host's.
#include <gtest/gtest.h>

#include "distributed/run/plan_gate.hpp"
#include "planner/device_fit.hpp"
#include "tests/distributed/run_test_support.hpp"

namespace dflash::train_testing {
namespace {

// The full-scale drafter on 8 ranks, 8 sequences of 4096 rows a step: the writing rank's gather of
// both moments (12.9 GiB) is its peak, above every rank's resumed start (9.7 GiB).
TEST(PlanGate, HostVerdictHoldsTheWritingRanksPeakAgainstItsShare) {
  const DrafterConfig config =
      load_drafter_config(std::filesystem::path(DFLASH_SOURCE_DIR) / "configs/qwen3.6-27b.json");
  TrainingConfig training;
  training.total_steps = 10;
  training.global_batch_sequences = 8;
  training.max_context = 4096;
  const int R = 8;
  const PlanVerdict plenty = plan_verdict(config, training, R, TrainingBackend::cuda, std::int64_t(1) << 40);
  ASSERT_TRUE(plenty.host.has_value());
  const std::int64_t peak = plenty.host->lead_peak();
  ASSERT_GT(peak, plenty.host->rank_peak());
  EXPECT_EQ(plenty.host_fit->total_bytes, peak);
  EXPECT_TRUE(plenty.fits());

  // Below 40 GiB the headroom is 2 GiB: a share of exactly peak + 2 GiB fits, a byte less does not.
  const std::int64_t exact = peak + kHeadroomMinimumBytes;
  ASSERT_LT(exact, std::int64_t(40) << 30);
  const PlanVerdict just = plan_verdict(config, training, R, TrainingBackend::cuda, exact);
  EXPECT_TRUE(just.host_fits());
  EXPECT_TRUE(just.fits());
  const PlanVerdict short_by_one = plan_verdict(config, training, R, TrainingBackend::cuda, exact - 1);
  EXPECT_FALSE(short_by_one.host_fits());
  EXPECT_TRUE(short_by_one.device_fits());
  EXPECT_FALSE(short_by_one.fits());

  std::ostringstream printed;
  print_plan_verdict(printed, short_by_one, "qwen3.6-27b.json", R, TrainingBackend::cuda);
  EXPECT_NE(printed.str().find("DOES NOT FIT"), std::string::npos) << printed.str();
  EXPECT_NE(printed.str().find("host memory per rank"), std::string::npos) << printed.str();

  const PlanVerdict cpu = plan_verdict(config, training, R, TrainingBackend::cpu, exact - 1);
  EXPECT_FALSE(cpu.host.has_value());
  EXPECT_TRUE(cpu.host_fits());
}

}  // namespace
}  // namespace dflash::train_testing
