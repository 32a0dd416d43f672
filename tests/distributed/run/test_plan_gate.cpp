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
  const PlanVerdict plenty =
      plan_verdict(config, training, R, TrainingBackend::cuda, RankHosts{1, std::int64_t(1) << 40});
  ASSERT_TRUE(plenty.host.has_value());
  const std::int64_t peak = plenty.host->lead_peak();
  ASSERT_GT(peak, plenty.host->rank_peak());
  EXPECT_EQ(plenty.host_fit->total_bytes, peak);
  EXPECT_TRUE(plenty.fits());

  // Below 40 GiB the headroom is 2 GiB: a share of exactly peak + 2 GiB fits, a byte less does not.
  const std::int64_t exact = peak + kHeadroomMinimumBytes;
  ASSERT_LT(exact, std::int64_t(40) << 30);
  const PlanVerdict just = plan_verdict(config, training, R, TrainingBackend::cuda, RankHosts{1, exact});
  EXPECT_TRUE(just.host_fits());
  EXPECT_TRUE(just.fits());
  const PlanVerdict short_by_one = plan_verdict(config, training, R, TrainingBackend::cuda, RankHosts{1, exact - 1});
  EXPECT_FALSE(short_by_one.host_fits());
  EXPECT_TRUE(short_by_one.device_fits());
  EXPECT_FALSE(short_by_one.fits());

  std::ostringstream printed;
  print_plan_verdict(printed, short_by_one, "qwen3.6-27b.json", R, TrainingBackend::cuda);
  EXPECT_NE(printed.str().find("DOES NOT FIT"), std::string::npos) << printed.str();
  EXPECT_NE(printed.str().find("host memory per rank"), std::string::npos) << printed.str();

  const PlanVerdict cpu = plan_verdict(config, training, R, TrainingBackend::cpu, RankHosts{1, exact - 1});
  EXPECT_FALSE(cpu.host.has_value());
  EXPECT_TRUE(cpu.host_fits());
}

// With backend cuda the device verdict is against the ranks' GPU memory when it is known, and
// against SPEC §1's 95 GB when it is not; backend cpu never reads it. The step: the full-scale
// drafter under ZeRO-0 with every trunk activation kept (78.5 GiB), which fits 95 GB (84.05 GiB
// usable) but not an 80 GB H100 (85,520,809,984 B as its driver reports it, 75.67 GiB usable).
TEST(PlanGate, DeviceVerdictHoldsTheStepToTheRanksGpu) {
  DrafterConfig config = load_drafter_config(std::filesystem::path(DFLASH_SOURCE_DIR) / "configs/qwen3.6-27b.json");
  config.trunk_policy = TrunkPolicy::none;
  TrainingConfig training;
  training.total_steps = 10;
  training.global_batch_sequences = 8;
  training.max_context = 4096;
  training.zero_stage = 0;
  const int R = 8;
  const std::int64_t host = std::int64_t(1) << 40, h100 = 85'520'809'984;
  const PlanVerdict unknown = plan_verdict(config, training, R, TrainingBackend::cuda, RankHosts{1, host});
  EXPECT_EQ(unknown.plan.fit.device_bytes, kDefaultDeviceBytes);
  EXPECT_TRUE(unknown.device_fits());
  const PlanVerdict on_h100 = plan_verdict(config, training, R, TrainingBackend::cuda, RankHosts{1, host}, h100);
  EXPECT_EQ(on_h100.plan.fit.device_bytes, h100);
  EXPECT_FALSE(on_h100.device_fits());
  EXPECT_FALSE(on_h100.fits());

  // The smallest device that holds the step under the headroom rule (bisection over device_fit,
  // monotone in the device's size): it fits to the byte, a byte less does not.
  const std::int64_t total = unknown.plan.fit.total_bytes;
  std::int64_t lo = total, hi = 2 * total + kHeadroomMinimumBytes;  // lo does not fit, hi does
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (device_fit(total, mid).fits ? hi : lo) = mid;
  }
  EXPECT_TRUE(plan_verdict(config, training, R, TrainingBackend::cuda, RankHosts{1, host}, hi).device_fits());
  EXPECT_FALSE(plan_verdict(config, training, R, TrainingBackend::cuda, RankHosts{1, host}, hi - 1).device_fits());

  const PlanVerdict cpu = plan_verdict(config, training, R, TrainingBackend::cpu, RankHosts{1, host}, h100);
  EXPECT_EQ(cpu.plan.fit.device_bytes, host) << "backend cpu: the device is the host share";
}

}  // namespace
}  // namespace dflash::train_testing
