// bench/cuda/drafter_step_metrics.hpp: the drafter step benchmark's FLOP count, plan comparison
// and targets, on the CPU.
#include "bench/cuda/drafter_step_metrics.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "common/attention_mask.hpp"
#include "io/errors.hpp"

namespace dflash {
namespace {

// Brute force over every (block row, key) pair with the kernels' own per-element mask decision.
std::int64_t brute_force_pairs(const std::vector<std::int64_t>& anchors, const std::vector<std::uint8_t>& keep,
                               std::int64_t S, std::int64_t B, bool sliding, std::int64_t window) {
  const AttentionMaskView mask{anchors.data(), keep.data(), S, B, sliding, window};
  const auto N = static_cast<std::int64_t>(anchors.size());
  std::int64_t pairs = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t k = 0; k < B; ++k) {
      for (std::int64_t key = 0; key < S + N * B; ++key) pairs += mask.visible(n, k, key) ? 1 : 0;
    }
  }
  return pairs;
}

// Anchors near 0 (the window clipped at the sequence start), far from it (clipped by the window),
// and an unkept slot.
TEST(AttentionVisiblePairs, EqualsTheMaskCountedPairByPair) {
  const std::vector<std::int64_t> anchors = {0, 1, 3, 9, 20, 37, 0};
  const std::vector<std::uint8_t> keep = {1, 1, 1, 1, 1, 1, 0};
  const std::int64_t S = 40, B = 4;
  for (const bool sliding : {false, true}) {
    for (const std::int64_t window : {4, 5, 8, 64}) {
      EXPECT_EQ(attention_visible_pairs(anchors, keep, B, sliding, window),
                brute_force_pairs(anchors, keep, S, B, sliding, window))
          << "sliding " << sliding << ", window " << window;
    }
  }
}

TEST(AttentionVisiblePairs, RefusesMismatchedKeepAndAWindowBelowTheBlock) {
  EXPECT_THROW(
      {
        try {
          attention_visible_pairs(std::vector<std::int64_t>{1, 2}, std::vector<std::uint8_t>{1}, 4, false, 0);
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("keep"), std::string::npos) << e.what();
          throw;
        }
      },
      InputError);
  EXPECT_THROW(
      {
        try {
          attention_visible_pairs(std::vector<std::int64_t>{1}, std::vector<std::uint8_t>{1}, 4, true, 3);
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("sliding_window"), std::string::npos) << e.what();
          throw;
        }
      },
      InputError);
}

DrafterDims full_scale() {
  DrafterDims m;
  m.S = 4096, m.N = 1024, m.B = 32, m.T = 32768, m.H = 5120, m.I = 17408, m.nh = 32, m.nkv = 8, m.d = 128, m.K = 5,
  m.V = 248320, m.L = 5;
  return m;
}

// The step's products listed one by one (another derivation than the per-layer formula): a
// trainable product costs its forward, dX and dW (3 x 2 m n k), fc its forward and dW, the frozen
// head's products their forward only.
double products_flops(const DrafterDims& m) {
  auto gemm = [](double rows, double in, double out) { return 2 * rows * in * out; };
  const double q = double(m.nh * m.d), kv = double(m.nkv * m.d), T = double(m.T), S = double(m.S), H = double(m.H);
  double total = 0;
  for (std::int64_t l = 0; l < m.L; ++l) {
    for (const double rows_in_out :
         {gemm(T, H, q), gemm(T, H, kv), gemm(T, H, kv), gemm(S, H, kv), gemm(S, H, kv), gemm(T, q, H),
          gemm(T, H, double(m.I)), gemm(T, H, double(m.I)), gemm(T, double(m.I), H)}) {
      total += 3 * rows_in_out;
    }
  }
  total += 2 * gemm(S, double(m.K) * H, H);
  total += gemm(T, H, double(m.V)) * 3;  // z, t, dL/dY
  return total;
}

TEST(DrafterStepFlops, LinearPartsEqualTheStepsProductsOneByOne) {
  const DrafterDims m = full_scale();
  const std::vector<std::int64_t> pairs(5, 0);
  const StepFlops f = drafter_step_flops(m, pairs, false, TrunkPolicy::per_layer, LossPolicy::chunk_recompute);
  EXPECT_EQ(f.attention(), 0.0);
  EXPECT_NEAR(f.model() / products_flops(m), 1.0, 1e-12);
  // dL/dF adds one fc product.
  const StepFlops with_df = drafter_step_flops(m, pairs, true, TrunkPolicy::per_layer, LossPolicy::chunk_recompute);
  EXPECT_NEAR(with_df.model() - f.model(), 2.0 * 4096 * 5 * 5120 * 5120, 1.0);
}

// DESIGN-NOTES.md's figures at full scale, each within half a unit of its last quoted digit:
// trunk linear 3.1e14, context path 0.05e14 (fc with dL/dF), loss head 2.5e14, attention forward
// 1.1e12 per layer and 2e13 forward + backward for 5 layers when every block row sees ~2100 keys.
TEST(DrafterStepFlops, MatchDesignNotesAtFullScale) {
  const DrafterDims m = full_scale();
  const std::vector<std::int64_t> pairs(5, std::int64_t(32768) * 2100);
  const StepFlops f = drafter_step_flops(m, pairs, true, TrunkPolicy::per_layer, LossPolicy::chunk_recompute);
  EXPECT_NEAR(f.block_linear, 3.1e14, 0.05e14);
  EXPECT_NEAR(f.context, 0.05e14, 0.005e14);
  EXPECT_NEAR(f.loss_head, 2.5e14, 0.05e14);
  EXPECT_NEAR(f.attention_forward / 5, 1.1e12, 0.05e12);
  EXPECT_NEAR(f.attention(), 2e13, 0.5e13);
  EXPECT_DOUBLE_EQ(f.attention_backward, 2 * f.attention_forward);
}

TEST(DrafterStepFlops, RecomputationIsExecutedNotModel) {
  const DrafterDims m = full_scale();
  const std::vector<std::int64_t> pairs = {10, 20, 30, 40, 50};
  const StepFlops none = drafter_step_flops(m, pairs, false, TrunkPolicy::none, LossPolicy::chunk_grad_in_forward);
  const StepFlops layer =
      drafter_step_flops(m, pairs, false, TrunkPolicy::per_layer, LossPolicy::chunk_grad_in_forward);
  const StepFlops both = drafter_step_flops(m, pairs, false, TrunkPolicy::per_layer, LossPolicy::chunk_recompute);
  EXPECT_EQ(none.model(), layer.model());
  EXPECT_EQ(layer.model(), both.model());
  EXPECT_EQ(none.executed(), none.model());
  // per_layer: one more forward of every layer: a third of its block projections' work, its
  // context keys and values (2 products of 2 S H nkv d), its attention forward.
  EXPECT_NEAR(layer.executed() - none.executed(),
              none.block_linear / 3 + 5 * 2 * (2.0 * 4096 * 5120 * 1024) + none.attention_forward, 1.0);
  EXPECT_DOUBLE_EQ(layer.attention_executed(), 2 * layer.attention_forward + layer.attention_backward);
  // chunk_recompute: z and t once more.
  EXPECT_NEAR(both.executed() - layer.executed(), 2 * 2.0 * 32768 * 5120 * 248320, 1.0);
}

TEST(DrafterStepFlops, RefusesAPairCountPerLayerThatIsNotL) {
  try {
    drafter_step_flops(full_scale(), std::vector<std::int64_t>(4, 0), false, TrunkPolicy::none,
                       LossPolicy::chunk_recompute);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("visible_pairs"), std::string::npos) << e.what();
  }
}

std::vector<CategoryComparison> comparison(std::int64_t planned, std::int64_t measured) {
  return {{MemoryCategory::parameters, 1000, 1000}, {MemoryCategory::saved, planned, measured}};
}

TEST(StepTargets, PlanExcessUpToTwoPercentIsMetAboveIsMissed) {
  EXPECT_TRUE(plan_excess_misses(comparison(100000, 102000)).empty());
  EXPECT_TRUE(plan_excess_misses(comparison(100000, 50000)).empty());
  const std::vector<std::string> misses = plan_excess_misses(comparison(100000, 102001));
  ASSERT_EQ(misses.size(), 1u);
  EXPECT_NE(misses[0].find("saved"), std::string::npos) << misses[0];
  // Nothing planned, something held: missed.
  EXPECT_EQ(plan_excess_misses(comparison(0, 1)).size(), 1u);
}

TEST(StepTargets, MfuTargetIsHalfTheMeasuredGemmRate) {
  const std::vector<CategoryComparison> fine = comparison(100, 100);
  EXPECT_TRUE(step_target_misses(400.0, 800.0, fine).empty());
  EXPECT_EQ(step_target_misses(399.9, 800.0, fine).size(), 1u);
  EXPECT_EQ(step_target_misses(std::numeric_limits<double>::quiet_NaN(), 800.0, fine).size(), 1u);
  const std::vector<std::string> both = step_target_misses(100.0, 800.0, comparison(100, 200));
  ASSERT_EQ(both.size(), 2u);
  EXPECT_NE(both[0].find("MFU"), std::string::npos) << both[0];
  EXPECT_NE(both[1].find("peak above plan"), std::string::npos) << both[1];
}

}  // namespace
}  // namespace dflash
