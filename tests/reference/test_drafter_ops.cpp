// The drafter's building blocks against their definitions (SPEC §3, §6, §7): RMSNorm, RoPE,
// the DFlash mask, SwiGLU, dropout factors, trunk policy names and segments.
#include <cmath>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "reference/attention.hpp"
#include "reference/counter_rng.hpp"
#include "reference/dropout.hpp"
#include "reference/mlp.hpp"
#include "reference/rms_norm.hpp"
#include "reference/rope.hpp"
#include "reference/trunk_policy.hpp"

namespace dflash {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

TEST(RmsNorm, IsWeightTimesXOverRootMeanSquare) {
  const std::vector<double> x = {0.5, -2.0, 3.0, 1.25}, w = {1.0, 0.5, -1.0, 2.0};
  std::vector<double> y(4);
  const double eps = 1e-6;
  const double rstd = rms_norm_forward(x.data(), w.data(), 4, eps, y.data());
  const double ms = (0.25 + 4.0 + 9.0 + 1.5625) / 4;
  EXPECT_NEAR(rstd, 1 / std::sqrt(ms + eps), 1e-15);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(y[c], w[c] * x[c] / std::sqrt(ms + eps), 1e-15);
}

TEST(RmsNorm, BackwardMatchesCentralDifferences) {
  const std::vector<double> x = {0.3, -1.1, 0.7, 2.0, -0.4}, w = {1.2, 0.8, -0.5, 1.0, 0.3};
  const std::vector<double> dy = {0.2, -0.7, 0.5, 0.1, -0.3};
  std::vector<double> dx(5, 0.0), dw(5, 0.0), y(5);
  const double eps = 1e-5;
  const double rstd = rms_norm_forward(x.data(), w.data(), 5, eps, y.data());
  rms_norm_backward(x.data(), w.data(), rstd, dy.data(), 5, dx.data(), dw.data());
  auto loss = [&](std::vector<double> xs, std::vector<double> ws) {
    std::vector<double> out(5);
    rms_norm_forward(xs.data(), ws.data(), 5, eps, out.data());
    double l = 0;
    for (int c = 0; c < 5; ++c) l += dy[c] * out[c];
    return l;
  };
  const double h = 1e-6;
  for (int c = 0; c < 5; ++c) {
    auto xp = x, xm = x, wp = w, wm = w;
    xp[c] += h, xm[c] -= h, wp[c] += h, wm[c] -= h;
    EXPECT_NEAR(dx[c], (loss(xp, w) - loss(xm, w)) / (2 * h), 1e-8);
    EXPECT_NEAR(dw[c], (loss(x, wp) - loss(x, wm)) / (2 * h), 1e-8);
  }
}

TEST(Rope, RotatesPairsByPositionTimesInverseFrequency) {
  MemoryTracker tracker;
  const std::int64_t d = 6;
  const double theta = 500.0;
  const std::vector<std::int64_t> positions = {0, 3, 17};
  const RopeTable<double> table(tracker, positions, d, theta);
  CounterRng rng(3);
  for (std::size_t p = 0; p < positions.size(); ++p) {
    std::vector<double> x(d), r(d);
    for (auto& v : x) v = rng.uniform(-1, 1);
    r = x;
    rope_forward(r.data(), table.cos_row(p), table.sin_row(p), d);
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const double phi = double(positions[p]) * std::pow(theta, -2.0 * double(i) / double(d));
      EXPECT_NEAR(r[i], x[i] * std::cos(phi) - x[i + d / 2] * std::sin(phi), 1e-14);
      EXPECT_NEAR(r[i + d / 2], x[i + d / 2] * std::cos(phi) + x[i] * std::sin(phi), 1e-14);
    }
    // The backward is the transposed rotation: applied to R x it gives x back.
    rope_backward(r.data(), table.cos_row(p), table.sin_row(p), d);
    for (std::int64_t i = 0; i < d; ++i) EXPECT_NEAR(r[i], x[i], 1e-15);
  }
}

// S = 10, B = 3, anchors [2, 6, 0] with kappa [1, 1, 0].
TEST(AttentionMask, FullLayerSeesThePastContextAndItsWholeBlock) {
  const std::vector<std::int64_t> anchors = {2, 6, 0};
  const std::vector<std::uint8_t> keep = {1, 1, 0};
  const AttentionMask mask{3, anchors, keep, LayerType::full_attention, 0};
  for (std::int64_t k = 0; k < 3; ++k) {
    const VisibleKeys v = mask.visible(3 + k);  // block 1
    EXPECT_EQ(v.context_begin, 0);
    EXPECT_EQ(v.context_end, 6);  // j < a_n: never its own anchor's feature or later
    EXPECT_EQ(v.block_begin, 3);
    EXPECT_EQ(v.block_end, 6);
  }
  for (std::int64_t k = 0; k < 3; ++k) EXPECT_TRUE(mask.visible(6 + k).empty());  // kappa = 0
}

TEST(AttentionMask, SlidingLayerLimitsContextToTheWindowAndBlockToEarlierRows) {
  const std::vector<std::int64_t> anchors = {2, 6, 0};
  const std::vector<std::uint8_t> keep = {1, 1, 0};
  const AttentionMask mask{3, anchors, keep, LayerType::sliding_attention, 3};
  for (std::int64_t k = 0; k < 3; ++k) {
    const VisibleKeys v = mask.visible(3 + k);
    EXPECT_EQ(v.context_begin, 6 + k - 2);  // j >= a_n + k - (window - 1)
    EXPECT_EQ(v.context_end, 6);
    EXPECT_EQ(v.block_begin, 3);
    EXPECT_EQ(v.block_end, 3 + k + 1);  // k' <= k
  }
  // Near the start the window is cut at 0; a window past the anchor leaves no context at all.
  EXPECT_EQ(mask.visible(0).context_begin, 0);
  EXPECT_EQ(mask.visible(2).context_begin, 2);
  EXPECT_EQ(mask.visible(2).context_end, 2);
  EXPECT_FALSE(mask.visible(2).empty());  // its own block rows remain
}

TEST(SwiGlu, BackwardMatchesCentralDifferences) {
  const std::vector<double> gate = {-3.0, -0.2, 0.0, 0.9, 4.0}, up = {0.5, -1.5, 2.0, 0.25, -0.75};
  const std::vector<double> d_act = {0.3, -0.1, 0.7, 1.1, -0.6};
  std::vector<double> act(5), d_gate(5), d_up(5);
  swiglu_forward(gate.data(), up.data(), act.data(), 5);
  swiglu_backward(gate.data(), up.data(), d_act.data(), d_gate.data(), d_up.data(), 5);
  const double h = 1e-6;
  for (int c = 0; c < 5; ++c) {
    EXPECT_NEAR(act[c], gate[c] / (1 + std::exp(-gate[c])) * up[c], 1e-15);
    auto f = [&](double g, double u) { return g / (1 + std::exp(-g)) * u; };
    EXPECT_NEAR(d_gate[c], d_act[c] * (f(gate[c] + h, up[c]) - f(gate[c] - h, up[c])) / (2 * h), 1e-8);
    EXPECT_NEAR(d_up[c], d_act[c] * (f(gate[c], up[c] + h) - f(gate[c], up[c] - h)) / (2 * h), 1e-8);
  }
}

TEST(Dropout, FactorIsZeroOrInverseKeepAndFollowsTheRngCoordinates) {
  const DropoutCoordinates at{99, 4, 12, DropoutPass::forward, nullptr};
  const double p = 0.25;
  const DropoutSiteMask<double> mask(at, 3, DropoutSite::mlp_residual, p);
  const std::uint32_t stream = rng_stream(12, 3, 3);
  for (std::uint64_t e = 0; e < 200; ++e) {
    const bool kept = rng_word(99, stream, 4, e) >= dropout_threshold(p);
    EXPECT_EQ(mask.factor(e), kept ? 1.0 / 0.75 : 0.0);
  }
  const DropoutSiteMask<double> off(at, 3, DropoutSite::mlp_residual, 0.0);
  EXPECT_FALSE(off.active());
  EXPECT_EQ(off.factor(5), 1.0);
  EXPECT_THAT([&] { DropoutSiteMask<double>(at, 0, DropoutSite::attention_probs, 1.0); },
              ThrowsMessage<InputError>(HasSubstr("must lie in [0, 1)")));
}

TEST(Dropout, ObserverSeesEveryDrawWithItsCoordinates) {
  std::vector<DropoutDraw> draws;
  const DropoutObserver observer = [&](const DropoutDraw& d) { draws.push_back(d); };
  const DropoutCoordinates at{5, 6, 7, DropoutPass::recompute, &observer};
  const DropoutSiteMask<double> mask(at, 2, DropoutSite::attention_probs, 0.5);
  for (std::uint64_t e : {3u, 11u}) mask.factor(e);
  ASSERT_EQ(draws.size(), 2u);
  EXPECT_EQ(draws[1].element, 11u);
  EXPECT_EQ(draws[1].pass, DropoutPass::recompute);
  EXPECT_EQ(draws[1].sequence, 7u);
  EXPECT_EQ(draws[1].layer, 2u);
  EXPECT_EQ(draws[1].site, DropoutSite::attention_probs);
  EXPECT_EQ(draws[1].kept, mask.factor(11) != 0.0);
}

TEST(TrunkPolicy, NamesParseAndSegments) {
  for (TrunkPolicy p : kAllTrunkPolicies) EXPECT_EQ(parse_trunk_policy(trunk_policy_name(p)), p);
  EXPECT_THAT(
      [] { parse_trunk_policy("all"); },
      ThrowsMessage<InputError>(HasSubstr("'all' is not a trunk policy (expected one of: none, per_layer, every_k)")));
  EXPECT_EQ(trunk_segment_length(TrunkPolicy::none, 2, 5), 5);
  EXPECT_EQ(trunk_segment_length(TrunkPolicy::per_layer, 2, 5), 1);
  EXPECT_EQ(trunk_segment_length(TrunkPolicy::every_k, 2, 5), 2);
  EXPECT_THAT([] { trunk_segment_length(TrunkPolicy::every_k, 0, 5); },
              ThrowsMessage<InputError>(HasSubstr("checkpoint_every: 0")));
}

}  // namespace
}  // namespace dflash
