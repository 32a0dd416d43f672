// The trunk's elementwise and per-row kernel bodies (cuda/trunk/elementwise_program.hpp) run on
// the CPU over their kernels' partition (one thread per element or per (row, head): a loop over
// every index; one block per row: harness/cuda/host_block_exec.hpp with the kernels' thread count),
// against the double reference: values within the fp32 rule of SPEC §10 (2 x the error of the
// reference run in float, plus a floor), dropout masks and gathers bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/tolerances.hpp"
#include "cuda/trunk/elementwise_program.hpp"
#include "harness/cuda/host_block_exec.hpp"
#include "reference/compare.hpp"
#include "reference/counter_rng.hpp"
#include "reference/drafter_layer.hpp"
#include "tests/cuda/attention/simt_support.hpp"

namespace dflash {
namespace {

std::vector<double> random_values(std::int64_t n, std::uint64_t seed, double lo = -2.0, double hi = 2.0) {
  CounterRng rng(seed);
  std::vector<double> x(static_cast<std::size_t>(n));
  for (double& v : x) v = static_cast<double>(static_cast<float>(rng.uniform(lo, hi)));
  return x;
}

template <class Real>
std::vector<Real> as(const std::vector<double>& x) {
  return std::vector<Real>(x.begin(), x.end());
}

void expect_rule(const char* name, const std::vector<float>& got, const std::vector<float>& plain,
                 const std::vector<double>& exact) {
  expect_within_rule(name, got, plain, exact, kAttentionFp32Floor);
}

// dw += a norm weight's gradient over x, dy [rows, n], as its kernel's grid computes it (one block
// per kNormWeightGradColumns columns, the kernel's thread count); threads in reverse order when
// `reverse` (a phase that read another thread's value of the same phase would change the result).
void run_weight_grad(const std::vector<float>& x, const std::vector<float>& rstd, const std::vector<float>& dy,
                     std::int64_t rows, std::int64_t n, std::vector<float>& dw, bool reverse = false) {
  run_grid_on_host(
      rms_norm_weight_grad_blocks(n), rms_norm_weight_grad_shared_bytes(kNormWeightGradThreads), kNormWeightGradThreads,
      reverse, [&](HostBlockExec& exec, unsigned char* shared, std::int64_t group) {
        rms_norm_weight_grad_block(exec, x.data(), rstd.data(), dy.data(), rows, n, dw.data(), shared, group);
      });
}

TEST(TrunkElementwise, EmbeddingGatherCopiesTheTokenRowsBitwise) {
  const std::int64_t V = 9, H = 5;
  const std::vector<float> table = as<float>(random_values(V * H, 1));
  const std::vector<std::int64_t> tokens = {3, 8, 8, 0, 8, 8, 7, 8};  // anchor tokens, mask token 8
  std::vector<float> x(tokens.size() * H, -1.0f);
  for (std::int64_t e = 0; e < static_cast<std::int64_t>(x.size()); ++e)
    embedding_gather_at(e, H, tokens.data(), table.data(), x.data());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    for (std::int64_t c = 0; c < H; ++c) {
      ASSERT_TRUE(same_bits(x[i * H + c], table[tokens[i] * H + c])) << "row " << i << " column " << c;
    }
  }
}

struct RowNormCase {
  std::int64_t rows, H;
  double scale;  // of x: at 1e-3, mean(x^2) ~ 1.3e-6 is of eps's size, so eps moves y far past the rule
};

class RowNorm : public ::testing::TestWithParam<RowNormCase> {};
INSTANTIATE_TEST_SUITE_P(Shapes, RowNorm,
                         ::testing::Values(RowNormCase{5, 16, 1.0}, RowNormCase{4, 300, 1.0}, RowNormCase{3, 1, 1.0},
                                           RowNormCase{5, 16, 1e-3}, RowNormCase{4, 300, 1e-3}));

TEST_P(RowNorm, ForwardAndBackwardWithinFp32Rule) {
  const auto [rows, H, scale] = GetParam();
  const std::vector<double> x = random_values(rows * H, 2, -2.0 * scale, 2.0 * scale),
                            w = random_values(H, 3, 0.5, 1.5), dy = random_values(rows * H, 4),
                            dx0 = random_values(rows * H, 5);
  const double eps = 1e-6;
  // Reference (double, and float as the plain fp32 computation): per row, dx accumulated onto dx0.
  auto reference = [&]<class Real>(Real) {
    struct Out {
      std::vector<Real> y, rstd, dx, dw;
    } o;
    const std::vector<Real> xr = as<Real>(x), wr = as<Real>(w), dyr = as<Real>(dy);
    o.y.resize(x.size());
    o.rstd.resize(static_cast<std::size_t>(rows));
    o.dx = as<Real>(dx0);
    o.dw.assign(static_cast<std::size_t>(H), Real(0));
    for (std::int64_t r = 0; r < rows; ++r) {
      o.rstd[r] = rms_norm_forward(xr.data() + r * H, wr.data(), H, Real(eps), o.y.data() + r * H);
      rms_norm_backward(xr.data() + r * H, wr.data(), o.rstd[r], dyr.data() + r * H, H, o.dx.data() + r * H,
                        o.dw.data());
    }
    return o;
  };
  const auto exact = reference(0.0);
  const auto plain = reference(0.0f);

  const std::vector<float> xf = as<float>(x), wf = as<float>(w), dyf = as<float>(dy);
  std::vector<float> y(x.size(), -1.0f), rstd(static_cast<std::size_t>(rows), -1.0f),
      dx = as<float>(dx0), dw(static_cast<std::size_t>(H), 0.0f);
  run_grid_on_host(rows, rms_norm_row_shared_bytes(kNormRowThreads), kNormRowThreads, false,
                   [&](HostBlockExec& exec, unsigned char* shared, std::int64_t row) {
                     rms_norm_forward_block(exec, xf.data(), wf.data(), H, static_cast<float>(eps), y.data(),
                                            rstd.data(), shared, row);
                   });
  run_grid_on_host(rows, rms_norm_row_shared_bytes(kNormRowThreads), kNormRowThreads, true,
                   [&](HostBlockExec& exec, unsigned char* shared, std::int64_t row) {
                     rms_norm_backward_block(exec, xf.data(), wf.data(), rstd.data(), dyf.data(), H, dx.data(), shared,
                                             row);
                   });
  run_weight_grad(xf, rstd, dyf, rows, H, dw);
  expect_rule("y", y, plain.y, exact.y);
  expect_rule("rstd", rstd, plain.rstd, exact.rstd);
  expect_rule("dx", dx, plain.dx, exact.dx);
  expect_rule("dw", dw, plain.dw, exact.dw);
}

// The weight gradient's grid at shapes the norm tests above do not reach: more rows than the block
// has row lanes (every lane sums several rows, the tree adds all 128), a row count that is not a
// multiple of them, and columns that fill one block and end part-way through the next. Each dw[c]
// is the double sum within the fp32 rule, accumulated onto what dw held; the values past dw's n
// (the last block's columns beyond n) are never written; the threads run in either order with the
// same bits.
TEST(TrunkElementwise, NormWeightGradientCoversEveryRowAndColumn) {
  for (const auto& [rows, n] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {300, 13}, {1000, 8}, {129, 24}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + ", n " + std::to_string(n));
    const std::vector<double> x = random_values(rows * n, 11), dy = random_values(rows * n, 12),
                              rstd = random_values(rows, 13, 0.5, 1.5), dw0 = random_values(n, 14);
    auto reference = [&]<class Real>(Real) {
      std::vector<Real> dw = as<Real>(dw0);
      for (std::int64_t c = 0; c < n; ++c) {
        Real s = 0;
        for (std::int64_t r = 0; r < rows; ++r) s += Real(dy[r * n + c]) * (Real(x[r * n + c]) * Real(rstd[r]));
        dw[c] += s;
      }
      return dw;
    };
    const std::vector<float> xf = as<float>(x), dyf = as<float>(dy), rstdf = as<float>(rstd);
    constexpr float kPastN = -0.0f;  // adding a zero partial to it would give +0
    std::vector<float> dw = as<float>(dw0);
    dw.resize(static_cast<std::size_t>(n + kNormWeightGradColumns), kPastN);
    std::vector<float> dw_reversed = dw;
    run_weight_grad(xf, rstdf, dyf, rows, n, dw);
    run_weight_grad(xf, rstdf, dyf, rows, n, dw_reversed, /*reverse=*/true);
    expect_rule("dw", std::vector<float>(dw.begin(), dw.begin() + n), reference(0.0f), reference(0.0));
    for (std::int64_t c = 0; c < n; ++c) EXPECT_TRUE(same_bits(dw[c], dw_reversed[c])) << "column " << c;
    for (std::size_t c = static_cast<std::size_t>(n); c < dw.size(); ++c)
      EXPECT_TRUE(same_bits(dw[c], kPastN)) << "column " << c;
  }
}

struct HeadNormCase {
  std::int64_t rows, heads, d;
};
class HeadNormRope : public ::testing::TestWithParam<HeadNormCase> {};
INSTANTIATE_TEST_SUITE_P(Shapes, HeadNormRope, ::testing::Values(HeadNormCase{7, 3, 4}, HeadNormCase{5, 2, 128}));

TEST_P(HeadNormRope, ForwardAndBackwardWithinFp32Rule) {
  const auto [rows, heads, d] = GetParam();
  const double eps = 1e-6, theta = 1e6;
  std::vector<std::int64_t> positions;  // up to the full-scale context: where float angles go wrong
  for (std::int64_t r = 0; r < rows; ++r) positions.push_back(r * 6151 % 36864);
  const std::vector<double> proj = random_values(rows * heads * d, 6), w = random_values(d, 7, 0.5, 1.5),
                            d_out = random_values(rows * heads * d, 8);
  auto reference = [&]<class Real>(Real) {
    MemoryTracker tracker;
    const auto t = [&](const std::vector<double>& v, std::int64_t n0, std::int64_t n1) {
      return Tensor<Real>(tracker, MemoryCategory::transient, {n0, n1}, as<Real>(v));
    };
    const Tensor<Real> p = t(proj, rows, heads * d), wt = t(w, 1, d);
    Tensor<Real> g = t(d_out, rows, heads * d);
    Tensor<Real> rstd(tracker, MemoryCategory::transient, {rows, heads}),
        out(tracker, MemoryCategory::transient, {rows, heads * d});
    Tensor<Real> d_proj(tracker, MemoryCategory::transient, {rows, heads * d}),
        dw(tracker, MemoryCategory::transient, {1, d});
    const RopeTable<Real> rope(tracker, positions, d, theta);
    drafter_layer_detail::head_norm_rope_forward(p, wt, Real(eps), rope, heads, d, rstd, out);
    drafter_layer_detail::head_norm_rope_backward(g, p, rstd, wt, rope, heads, d, d_proj, dw);
    struct Out {
      std::vector<Real> out, rstd, d_proj, dw;
    };
    return Out{out.values(), rstd.values(), d_proj.values(), dw.values()};
  };
  const auto exact = reference(0.0);
  const auto plain = reference(0.0f);

  const std::vector<float> pf = as<float>(proj), wf = as<float>(w);
  std::vector<float> g = as<float>(d_out), out(proj.size(), -1.0f), rstd(static_cast<std::size_t>(rows * heads), -1.0f),
                     d_proj(proj.size(), -1.0f), dw(static_cast<std::size_t>(d), 0.0f);
  for (std::int64_t rh = 0; rh < rows * heads; ++rh) {
    head_norm_rope_forward_at(rh, pf.data(), wf.data(), heads, d, static_cast<float>(eps), positions.data(), theta,
                              out.data(), rstd.data());
  }
  for (std::int64_t rh = 0; rh < rows * heads; ++rh) {
    head_norm_rope_backward_at(rh, g.data(), pf.data(), wf.data(), rstd.data(), heads, d, positions.data(), theta,
                               d_proj.data());
  }
  run_weight_grad(pf, rstd, g, rows * heads, d, dw);
  expect_rule("out", out, plain.out, exact.out);
  expect_rule("rstd", rstd, plain.rstd, exact.rstd);
  expect_rule("d_proj", d_proj, plain.d_proj, exact.d_proj);
  expect_rule("dw", dw, plain.dw, exact.dw);
}

// The fp32 rule above cannot see how the kernels get RoPE's cos and sin: its plain fp32 computation
// (RopeTable<float>) takes the angle in float, off by up to ~2e-3 rad at position 4e4, so a kernel
// making the same mistake stays inside 2 x its error. The contract (common/rope_rotation.hpp) is the
// angle in double, its cos and sin each rounded once to float: within one fp32 unit of the double
// values at every position up to and past the full-scale context, for both RoPE bases in use.
TEST(TrunkElementwise, RopeCosSinAreTheDoubleAngleRoundedOnce) {
  for (const double theta : {1e4, 1e6}) {
    for (const std::int64_t d : {std::int64_t(4), std::int64_t(128)}) {
      for (const std::int64_t position : {0, 1, 4095, 36863, 65535, 262143}) {
        for (std::int64_t i = 0; i < d / 2; ++i) {
          float c = 0, s = 0;
          rope_cos_sin(position, i, d, theta, c, s);
          const double phi = rope_angle(position, i, d, theta);
          ASSERT_LE(std::abs(double(c) - std::cos(phi)), kFp32Unit)
              << "cos, theta " << theta << ", d " << d << ", position " << position << ", pair " << i;
          ASSERT_LE(std::abs(double(s) - std::sin(phi)), kFp32Unit)
              << "sin, theta " << theta << ", d " << d << ", position " << position << ", pair " << i;
        }
      }
    }
  }
}

TEST(TrunkElementwise, SwigluForwardAndBackwardWithinFp32Rule) {
  const std::int64_t n = 777;
  const std::vector<double> gate = random_values(n, 9, -8.0, 8.0), up = random_values(n, 10),
                            d_act = random_values(n, 11);
  auto reference = [&]<class Real>(Real) {
    const std::vector<Real> g = as<Real>(gate), u = as<Real>(up), da = as<Real>(d_act);
    std::vector<Real> act(gate.size()), dg(gate.size()), du(gate.size());
    swiglu_forward(g.data(), u.data(), act.data(), n);
    swiglu_backward(g.data(), u.data(), da.data(), dg.data(), du.data(), n);
    return std::vector<std::vector<Real>>{act, dg, du};
  };
  const auto exact = reference(0.0);
  const auto plain = reference(0.0f);
  const std::vector<float> g = as<float>(gate), u = as<float>(up), da = as<float>(d_act);
  std::vector<float> act(gate.size(), -1.0f), dg(gate.size(), -1.0f), du(gate.size(), -1.0f);
  for (std::int64_t e = 0; e < n; ++e) {
    swiglu_forward_at(e, g.data(), u.data(), act.data());
    swiglu_backward_at(e, g.data(), u.data(), da.data(), dg.data(), du.data());
  }
  expect_rule("act", act, plain[0], exact[0]);
  expect_rule("d_gate", dg, plain[1], exact[1]);
  expect_rule("d_up", du, plain[2], exact[2]);
}

// Sites 2 and 3 of layer 1: the kept elements are exactly the reference's, the values its own.
TEST(TrunkElementwise, ResidualDropoutMasksBitwiseAndValuesWithinFp32Rule) {
  const std::int64_t T = 6, H = 50;
  const double p = 0.3;
  const std::vector<double> x = random_values(T * H, 12), branch = random_values(T * H, 13),
                            d_out = random_values(T * H, 14);
  for (const DropoutSite site : {DropoutSite::attention_residual, DropoutSite::mlp_residual}) {
    MemoryTracker tracker;
    const DropoutCoordinates at{kCaseSeed, kCaseStep, kCaseSequence, DropoutPass::forward, nullptr};
    auto reference = [&]<class Real>(Real) {
      const DropoutSiteMask<Real> mask(at, 1, site, p);
      const Tensor<Real> xt(tracker, MemoryCategory::transient, {T, H}, as<Real>(x));
      const Tensor<Real> bt(tracker, MemoryCategory::transient, {T, H}, as<Real>(branch));
      const Tensor<Real> dt(tracker, MemoryCategory::transient, {T, H}, as<Real>(d_out));
      Tensor<Real> out(tracker, MemoryCategory::transient, {T, H}),
          d_branch(tracker, MemoryCategory::transient, {T, H});
      drafter_layer_detail::add_dropped_residual(xt, bt, mask, out);
      drafter_layer_detail::dropped_residual_backward(dt, mask, d_branch);
      std::vector<bool> kept;
      for (std::int64_t e = 0; e < T * H; ++e) kept.push_back(mask.factor(static_cast<std::uint64_t>(e)) != Real(0));
      return std::tuple{out.values(), d_branch.values(), kept};
    };
    const auto [exact_out, exact_db, exact_kept] = reference(0.0);
    const auto [plain_out, plain_db, plain_kept] = reference(0.0f);
    const DropoutSiteView view = dropout_site_view(kCaseSeed, kCaseStep, kCaseSequence, 1, site, p);
    const std::vector<float> xf = as<float>(x), bf = as<float>(branch), df = as<float>(d_out);
    std::vector<float> out(x.size(), -1.0f), d_branch(x.size(), -1.0f);
    for (std::int64_t e = 0; e < T * H; ++e) {
      residual_dropout_forward_at(e, xf.data(), bf.data(), view, out.data());
      residual_dropout_backward_at(e, df.data(), view, d_branch.data());
    }
    std::int64_t dropped = 0;
    for (std::int64_t e = 0; e < T * H; ++e) {
      ASSERT_EQ(view.factor(static_cast<std::uint64_t>(e)) != 0.0f, static_cast<bool>(exact_kept[e]))
          << "element " << e;
      dropped += exact_kept[e] ? 0 : 1;
    }
    EXPECT_GT(dropped, 0);
    expect_rule("out", out, plain_out, exact_out);
    expect_rule("d_branch", d_branch, plain_db, exact_db);
  }
}

}  // namespace
}  // namespace dflash
