// The optimizer kernels' programs (cuda/optimizer_program.hpp) on the host over the kernels' real
// grid and threads, phase by phase, against a double AdamW written out from TRAINING §12 here
// (torch.optim.AdamW's formulas), on a flat vector with decayed and non-decayed tensors and a size
// that is not a multiple of the block.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/tolerances.hpp"
#include "cuda/optimizer_program.hpp"
#include "tests/cuda/host_block_exec.hpp"

namespace dflash {
namespace {

// Tensors of the test's flat vector: a matrix, a norm weight, a matrix, a norm weight.
const std::vector<std::int64_t> kEnds = {700, 764, 1300, 1337};
const std::vector<unsigned char> kDecay = {1, 0, 1, 0};
constexpr std::int64_t kCount = 1337;  // 5 blocks and 57 elements: not a multiple of 256

DecayTable test_table() { return {kEnds.data(), kDecay.data(), int(kEnds.size())}; }

std::vector<float> random_floats(std::int64_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& value : x) value = u(rng);
  return x;
}

double squared_norm_on_host(const std::vector<float>& g, bool reverse) {
  const std::int64_t n = std::int64_t(g.size());
  const std::int64_t blocks = norm_blocks(n);
  std::vector<double> partials(std::size_t(blocks), std::nan(""));
  run_grid_on_host(blocks, kOptimizerThreads * sizeof(double), kOptimizerThreads, reverse,
                   [&](HostBlockExec& exec, unsigned char* shared, std::int64_t block) {
                     squared_norm_block_program(exec, reinterpret_cast<double*>(shared), g.data(), n, blocks, block,
                                                partials.data());
                   });
  return squared_norm_of_partials(partials.data(), blocks);
}

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

TEST(OptimizerProgram, SquaredNormIsOneTreeWhateverTheThreadOrder) {
  const std::vector<float> g = random_floats(kCount, 1, 1.0f);
  const double forward = squared_norm_on_host(g, false);
  const double reverse = squared_norm_on_host(g, true);
  EXPECT_EQ(forward, reverse);  // bitwise: the tree does not depend on which thread runs first
  double plain = 0;
  for (float x : g) plain += double(x) * double(x);
  EXPECT_LE(std::abs(forward - plain), kReferenceTolerance * plain);
}

// Decay flags, independently of decays_at: element by element from the tensor list.
bool decays(std::int64_t e) {
  for (std::size_t i = 0; i < kEnds.size(); ++i)
    if (e < kEnds[i]) return kDecay[i] != 0;
  return false;
}

TEST(OptimizerProgram, AdamWStepsFollowTheDoubleReferenceAndTheCastIsBf16Rounding) {
  const double lr = 1e-3, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, max_norm = 5.0;
  const int steps = 3;
  const std::int64_t n = kCount;
  std::vector<float> theta = random_floats(n, 2, 0.5f), m(std::size_t(n), 0.0f), v(std::size_t(n), 0.0f);
  std::vector<double> theta_d(theta.begin(), theta.end()), m_d(std::size_t(n), 0.0), v_d(std::size_t(n), 0.0);
  std::vector<double> moved(std::size_t(n), 0.0), g_max(std::size_t(n), 0.0);
  for (int t = 0; t < steps; ++t) {
    const std::vector<float> g = random_floats(n, 10 + unsigned(t), 1.0f);
    const double clip = clip_coefficient(std::sqrt(squared_norm_on_host(g, false)), max_norm);
    ASSERT_LT(clip, 1.0) << "clipping is active";
    const double lr_t = lr;
    // The double reference, written out from §12 (torch.optim.AdamW, bias corrections from t + 1).
    const double bias1 = 1.0 - std::pow(beta1, t + 1), bias2 = 1.0 - std::pow(beta2, t + 1);
    for (std::int64_t e = 0; e < n; ++e) {
      const std::size_t i = std::size_t(e);
      const double gd = double(g[i]) * clip;
      if (decays(e)) theta_d[i] *= 1.0 - lr_t * weight_decay;
      m_d[i] = beta1 * m_d[i] + (1.0 - beta1) * gd;
      v_d[i] = beta2 * v_d[i] + (1.0 - beta2) * gd * gd;
      const double update = lr_t / bias1 * m_d[i] / (std::sqrt(v_d[i]) / std::sqrt(bias2) + eps);
      theta_d[i] -= update;
      moved[i] += std::abs(update) + lr_t * weight_decay * std::abs(theta_d[i]);
      g_max[i] = std::max(g_max[i], std::abs(gd));
    }
    // The fp32 program over the kernel's grid; once per thread order, which must agree bitwise.
    std::vector<float> thetas[2] = {theta, theta}, ms[2] = {m, m}, vs[2] = {v, v};
    for (int order = 0; order < 2; ++order) {
      const AdamWRange range{thetas[order].data(), ms[order].data(), vs[order].data(), g.data(), 0, n, clip,
                             adamw_scalars(lr_t, weight_decay, true, beta1, beta2, eps, t),
                             adamw_scalars(lr_t, weight_decay, false, beta1, beta2, eps, t), test_table()};
      const std::int64_t blocks = elementwise_blocks(n);
      run_grid_on_host(blocks, 0, kOptimizerThreads, order == 1,
                       [&](HostBlockExec& exec, unsigned char*, std::int64_t block) {
                         elementwise_block_program(exec, n, blocks, block,
                                                   [&](std::int64_t i) { adamw_step_at(i, range); });
                       });
    }
    ASSERT_EQ(thetas[0], thetas[1]);
    ASSERT_EQ(ms[0], ms[1]);
    ASSERT_EQ(vs[0], vs[1]);
    theta = thetas[0], m = ms[0], v = vs[0];
    const double bound = adamw_fp32_bound(t + 1);
    for (std::int64_t e = 0; e < n; ++e) {
      const std::size_t i = std::size_t(e);
      ASSERT_LE(std::abs(theta[i] - theta_d[i]), bound * (std::abs(theta_d[i]) + moved[i]))
          << "theta, step " << t << ", element " << e;
      ASSERT_LE(std::abs(m[i] - m_d[i]), bound * (std::abs(m_d[i]) + g_max[i])) << "m, step " << t << ", element " << e;
      ASSERT_LE(std::abs(v[i] - v_d[i]), bound * (std::abs(v_d[i]) + g_max[i] * g_max[i]))
          << "v, step " << t << ", element " << e;
    }
  }
  std::vector<std::uint16_t> working(std::size_t(n), 0xFFFF);
  const std::int64_t blocks = elementwise_blocks(n);
  run_grid_on_host(blocks, 0, kOptimizerThreads, false, [&](HostBlockExec& exec, unsigned char*, std::int64_t block) {
    elementwise_block_program(exec, n, blocks, block, [&](std::int64_t i) { bf16_copy_at(i, theta.data(), working.data()); });
  });
  for (std::int64_t e = 0; e < n; ++e) {
    const std::size_t i = std::size_t(e);
    ASSERT_EQ(working[i], bf16_bits_from_float(theta[i])) << "element " << e;
    // bf16 keeps the top 16 bits: the copy is within half a bf16 ulp (2^-9 relative) of the master.
    ASSERT_LE(std::abs(float_from_bf16_bits(working[i]) - theta[i]), std::abs(theta[i]) * 0x1p-8f) << "element " << e;
  }
}

TEST(OptimizerProgram, DecayFollowsTheTensorTable) {
  const DecayTable table = test_table();
  for (std::int64_t e = 0; e < kCount; ++e) ASSERT_EQ(decays_at(table, e), decays(e)) << "element " << e;
}

}  // namespace
}  // namespace dflash
