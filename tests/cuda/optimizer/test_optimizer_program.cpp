// The optimizer kernels' programs (cuda/optimizer/adamw_program.hpp) on the host over the kernels' real
// grid and threads, phase by phase, against a double AdamW written out from TRAINING §12
// (tests/cuda/optimizer/test_support.hpp), on a flat vector with decayed and non-decayed tensors
// and a size that is not a multiple of the block.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/tolerances.hpp"
#include "cuda/optimizer/adamw_program.hpp"
#include "tests/cuda/optimizer/test_support.hpp"

namespace dflash {
namespace {

constexpr std::int64_t kCount = 1337;  // 5 blocks and 57 elements: not a multiple of 256

TEST(OptimizerProgram, NormThreadRangesCoverEveryElementOnce) {
  for (std::int64_t n : {std::int64_t(1), std::int64_t(255), kCount, std::int64_t(300000)}) {
    const std::int64_t blocks = norm_blocks(n);
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    for (std::int64_t b = 0; b < blocks; ++b) {
      for (int t = 0; t < kOptimizerThreads; ++t) {
        const IndexRange r = norm_thread_range(n, blocks, kOptimizerThreads, b, t);
        for (std::int64_t e = r.begin; e < r.end; ++e) ++seen[std::size_t(e)];
      }
    }
    for (std::int64_t e = 0; e < n; ++e) ASSERT_EQ(seen[std::size_t(e)], 1) << "n " << n << ", element " << e;
  }
}

// The norm's grid writes one partial a block into a buffer of kNormMaxBlocks (the step's and the
// ZeRO-0 reduction's): at any size, up to a full-scale gradient and far past it, the grid must not
// outgrow it (past 1024 x 256 elements each thread takes several).
TEST(OptimizerProgram, NormGridFitsItsPartialsBufferAtEverySize) {
  for (std::int64_t n : {std::int64_t(0), std::int64_t(1), kNormMaxBlocks * kOptimizerThreads,
                         kNormMaxBlocks * kOptimizerThreads + 1, std::int64_t(300000), std::int64_t(1) << 33}) {
    EXPECT_GE(norm_blocks(n), 1) << "n " << n;
    EXPECT_LE(norm_blocks(n), kNormMaxBlocks) << "n " << n;
  }
  // and the norm of such a gradient is still one tree over every element: its sums of positive
  // terms (up to two a thread, 8 levels over a block's 256, then 1024 partials in turn) are within
  // about 1030 u (1.2e-13) of the exact sum, here in long double (a sequential double sum of
  // 300000 terms could itself be 3e-11 off)
  const std::vector<float> g = random_floats(300000, 2, 1.0f);
  long double exact = 0;
  for (float x : g) exact += static_cast<long double>(x) * static_cast<long double>(x);
  const double plain = static_cast<double>(exact);
  EXPECT_LE(std::abs(squared_norm_on_host(g, false) - plain), kReferenceTolerance * plain);
}

TEST(OptimizerProgram, SquaredNormIsOneTreeWhateverTheThreadOrder) {
  const std::vector<float> g = random_floats(kCount, 1, 1.0f);
  const double forward = squared_norm_on_host(g, false);
  EXPECT_EQ(forward, squared_norm_on_host(g, true));  // bitwise: no thread depends on another's order
  double plain = 0;
  for (float x : g) plain += double(x) * double(x);
  EXPECT_LE(std::abs(forward - plain), kReferenceTolerance * plain);
}

TEST(OptimizerProgram, DecayFollowsTheTensorTable) {
  const TestFlat flat(kCount);
  const DecayTable table = flat.table();
  for (std::int64_t e = 0; e < kCount; ++e) ASSERT_EQ(decays_at(table, e), flat.decays(e)) << "element " << e;
}

TEST(OptimizerProgram, AdamWStepsFollowTheDoubleReferenceAndTheCastIsBf16Rounding) {
  const TestAdamW h;
  const TestFlat flat(kCount);
  std::vector<float> theta = random_floats(kCount, 2, 0.5f), m(kCount, 0.0f), v(kCount, 0.0f);
  DoubleAdamW reference(theta, flat, h);
  for (int t = 0; t < 3; ++t) {
    const std::vector<float> g = random_floats(kCount, 10 + unsigned(t), 1.0f);
    const double clip = clip_coefficient(std::sqrt(squared_norm_on_host(g, false)), h.max_norm);
    ASSERT_LT(clip, 1.0) << "clipping is active";
    reference.step(g, clip, t);
    // Once per thread order, which must agree bitwise (each thread owns its elements).
    std::vector<float> thetas[2] = {theta, theta}, ms[2] = {m, m}, vs[2] = {v, v};
    for (int order = 0; order < 2; ++order) {
      const AdamWRange range = adamw_range(thetas[order].data(), ms[order].data(), vs[order].data(), g.data(), kCount,
                                           clip, h, t, flat.table());
      elementwise_on_host(kCount, order == 1, [&](std::int64_t i) { adamw_step_at(i, range); });
    }
    ASSERT_EQ(thetas[0], thetas[1]);
    ASSERT_EQ(ms[0], ms[1]);
    ASSERT_EQ(vs[0], vs[1]);
    theta = thetas[0], m = ms[0], v = vs[0];
    ASSERT_TRUE(reference.within_fp32_rule(theta, m, v));
  }
  std::vector<std::uint16_t> working(kCount, 0xFFFF);
  elementwise_on_host(kCount, false, [&](std::int64_t i) { bf16_copy_at(i, theta.data(), working.data()); });
  for (std::int64_t e = 0; e < kCount; ++e) {
    const std::size_t i = std::size_t(e);
    ASSERT_EQ(working[i], bf16_bits_from_float(theta[i])) << "element " << e;
    // Nearest rounding to 8 significant bits: within half a bf16 ulp, 2^-8 relative at most.
    ASSERT_LE(std::abs(float_from_bf16_bits(working[i]) - theta[i]), std::abs(theta[i]) * 0x1p-8f) << "element " << e;
  }
}

// ZeRO-1: a rank steps only its shard [begin, end) of the flat vector, held from index 0 of its own
// buffers, and decides decay by the flat index begin + i. Shards that start past 0, end short of the
// end and cross tensor boundaries (the table's ends: 668, 732, 1300, 1337) must give bitwise the
// whole vector's step on their elements; a per-element lookup that drops the offset does not.
TEST(OptimizerProgram, ShardsPastTheStartStepAsTheWholeVectorDoes) {
  const TestAdamW h;
  const TestFlat flat(kCount);
  const std::vector<float> theta0 = random_floats(kCount, 3, 0.5f), m0 = random_floats(kCount, 4, 0.1f);
  std::vector<float> v0 = random_floats(kCount, 5, 0.1f);
  for (float& x : v0) x = x * x;  // second moments are non-negative
  const std::vector<float> g = random_floats(kCount, 6, 1.0f);
  const double clip = 0.75;
  const long long t = 2;
  std::vector<float> theta = theta0, m = m0, v = v0;
  const AdamWRange whole = adamw_range(theta.data(), m.data(), v.data(), g.data(), kCount, clip, h, t, flat.table());
  elementwise_on_host(kCount, false, [&](std::int64_t i) { adamw_step_at(i, whole); });
  const std::int64_t bounds[] = {0, 600, 1320, kCount};
  for (int r = 0; r < 3; ++r) {
    const std::int64_t begin = bounds[r], end = bounds[r + 1], n = end - begin;
    std::vector<float> ts(theta0.begin() + begin, theta0.begin() + end), ms(m0.begin() + begin, m0.begin() + end),
        vs(v0.begin() + begin, v0.begin() + end), gs(g.begin() + begin, g.begin() + end);
    AdamWRange shard = adamw_range(ts.data(), ms.data(), vs.data(), gs.data(), n, clip, h, t, flat.table());
    shard.begin = begin;
    shard.end = end;
    elementwise_on_host(n, r == 1, [&](std::int64_t i) { adamw_step_at(i, shard); });
    for (std::int64_t i = 0; i < n; ++i) {
      const std::size_t local = std::size_t(i), global = std::size_t(begin + i);
      ASSERT_EQ(ts[local], theta[global]) << "shard [" << begin << ", " << end << ") element " << begin + i;
      ASSERT_EQ(ms[local], m[global]) << "element " << begin + i;
      ASSERT_EQ(vs[local], v[global]) << "element " << begin + i;
    }
  }
}

}  // namespace
}  // namespace dflash
