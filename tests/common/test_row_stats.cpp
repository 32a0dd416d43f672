// Streaming row statistics (common/row_stats.hpp) against the two-pass definitions, and merge():
// any split of a row, merged, gives the row's statistics; argmax ties go to the lowest index.
#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "common/row_stats.hpp"

namespace dflash {
namespace {

struct LogitRow {
  std::vector<double> z, t;
  std::int64_t label;
};

LogitRow make_row(int n, unsigned seed, double spread) {
  LogitRow r{std::vector<double>(n), std::vector<double>(n), seed % n};
  unsigned x = seed * 2654435761u + 1;
  auto next = [&] {
    x = x * 1664525u + 1013904223u;
    return (x >> 8) / double(1 << 24) - 0.5;
  };
  for (int i = 0; i < n; ++i) {
    r.z[i] = spread * next();
    r.t[i] = spread * next();
  }
  return r;
}

HybridRowStats<double> stream(const LogitRow& r, int begin, int end, double tau) {
  HybridRowStats<double> s;
  for (int v = begin; v < end; ++v) s.update(r.z[v], r.t[v], v, r.label, tau);
  return s;
}

// The definitions, two passes each.
double lse(const std::vector<double>& x, double scale) {
  double m = -INFINITY;
  for (double v : x) m = std::max(m, v / scale);
  double s = 0;
  for (double v : x) s += std::exp(v / scale - m);
  return m + std::log(s);
}

// Tolerance: every quantity is a sum of at most 64 terms of size O(1..spread); the streaming and
// two-pass orders differ by a few ulps of the largest term per step: 1e-13 relative is ample, and
// a wrong rescaling (the bugs this catches) is off by O(1).
constexpr double kTol = 1e-13;

TEST(HybridRowStats, StreamingMatchesTwoPassDefinitions) {
  for (unsigned seed = 1; seed < 40; ++seed) {
    for (double tau : {0.05, 0.7, 1.0, 3.5}) {
      const LogitRow r = make_row(1 + seed % 64, seed, seed % 3 == 0 ? 200.0 : 6.0);
      const HybridRowResult<double> got = finish_row(stream(r, 0, int(r.z.size()), tau), tau);
      const double lse_z = lse(r.z, 1.0), lse_zt = lse(r.z, tau), lse_tt = lse(r.t, tau);
      double kl = 0;
      for (std::size_t v = 0; v < r.z.size(); ++v) {
        const double log_q = r.t[v] / tau - lse_tt, log_pt = r.z[v] / tau - lse_zt;
        kl += std::exp(log_q) * (log_q - log_pt);
      }
      const double scale = std::abs(lse_zt) + std::abs(lse_tt) + 1;
      EXPECT_NEAR(got.lse_z, lse_z, kTol * (std::abs(lse_z) + 1));
      EXPECT_NEAR(got.lse_zt, lse_zt, kTol * (std::abs(lse_zt) + 1));
      EXPECT_NEAR(got.lse_tt, lse_tt, kTol * (std::abs(lse_tt) + 1));
      EXPECT_NEAR(got.ce, lse_z - r.z[r.label], kTol * (std::abs(lse_z) + 1));
      EXPECT_NEAR(got.kl, kl, kTol * scale);
    }
  }
}

TEST(HybridRowStats, AnySplitMergesToTheWholeRow) {
  const double tau = 0.8;
  for (unsigned seed = 1; seed < 12; ++seed) {
    const LogitRow r = make_row(37, seed, 20.0);
    const int n = int(r.z.size());
    const HybridRowResult<double> whole = finish_row(stream(r, 0, n, tau), tau);
    const HybridRowStats<double> whole_stats = stream(r, 0, n, tau);
    for (int cut = 0; cut <= n; ++cut) {
      const auto left = stream(r, 0, cut, tau), right = stream(r, cut, n, tau);
      for (const auto& m : {HybridRowStats<double>::merge(left, right), HybridRowStats<double>::merge(right, left)}) {
        const HybridRowResult<double> got = finish_row(m, tau);
        EXPECT_EQ(m.count, n);
        EXPECT_EQ(m.argmax, whole_stats.argmax);
        EXPECT_EQ(m.z_label, whole_stats.z_label);  // exactly: one side holds it, the other adds 0
        EXPECT_NEAR(got.lse_z, whole.lse_z, kTol * (std::abs(whole.lse_z) + 1));
        EXPECT_NEAR(got.lse_tt, whole.lse_tt, kTol * (std::abs(whole.lse_tt) + 1));
        EXPECT_NEAR(got.kl, whole.kl, kTol * (std::abs(whole.lse_zt) + std::abs(whole.lse_tt) + 1));
      }
    }
  }
}

TEST(HybridRowStats, ArgmaxTiesResolveToLowestIndexInEveryOrder) {
  LogitRow r{{1, 5, 2, 5, 0, 5}, {0, 0, 0, 0, 0, 0}, 0};
  EXPECT_EQ(stream(r, 0, 6, 1.0).argmax, 1);
  const auto a = stream(r, 0, 3, 1.0), b = stream(r, 3, 6, 1.0);
  EXPECT_EQ(HybridRowStats<double>::merge(a, b).argmax, 1);
  EXPECT_EQ(HybridRowStats<double>::merge(b, a).argmax, 1);
  // Columns absorbed out of order (as a kernel's threads might) still give the lowest index.
  HybridRowStats<double> s;
  for (int v : {5, 3, 1, 0, 2, 4}) s.update(r.z[v], r.t[v], v, r.label, 1.0);
  EXPECT_EQ(s.argmax, 1);
}

TEST(HybridRowStats, EmptyIsTheIdentityOfMerge) {
  const LogitRow r = make_row(9, 3, 4.0);
  const auto s = stream(r, 0, 9, 1.3);
  const HybridRowStats<double> empty;
  const auto left = HybridRowStats<double>::merge(empty, s), right = HybridRowStats<double>::merge(s, empty);
  EXPECT_EQ(left.sum_z, s.sum_z);
  EXPECT_EQ(right.q_diff, s.q_diff);
  EXPECT_EQ(left.count, 9);
}

TEST(HybridRowStats, GradientSumsToZeroAndMatchesDefinition) {
  // sum_v dL/dz_v = scale (h (1 - 1) + s tau (1 - 1)) = 0, and each entry is the SPEC §5 formula.
  const double tau = 0.6, h = 0.85, soft = 0.15, scale = 0.25;
  const LogitRow r = make_row(23, 5, 8.0);
  const HybridRowResult<double> row = finish_row(stream(r, 0, 23, tau), tau);
  double total = 0;
  for (int v = 0; v < 23; ++v) {
    const double g =
        hybrid_logit_grad(r.z[v], teacher_log_prob(r.t[v], row, tau), v == r.label, row, tau, h, soft, scale);
    const double p = std::exp(r.z[v] - row.lse_z), pt = std::exp(r.z[v] / tau - row.lse_zt);
    const double q = std::exp(r.t[v] / tau - row.lse_tt);
    EXPECT_NEAR(g, scale * (h * (p - (v == r.label)) + soft * tau * (pt - q)), 1e-15);
    total += g;
  }
  EXPECT_NEAR(total, 0.0, 1e-15);
}

TEST(HybridRowStats, FloatInstantiationWorksOnTheHost) {
  // The kernels run the float instantiation; check it agrees with double to float accuracy.
  const LogitRow r = make_row(50, 9, 10.0);
  HybridRowStats<float> s;
  for (int v = 0; v < 50; ++v) s.update(float(r.z[v]), float(r.t[v]), v, r.label, 0.9f);
  const HybridRowResult<float> f = finish_row(s, 0.9f);
  const HybridRowResult<double> d = finish_row(stream(r, 0, 50, 0.9), 0.9);
  EXPECT_NEAR(f.lse_z, d.lse_z, 1e-5 * (std::abs(d.lse_z) + 1));
  EXPECT_NEAR(f.kl, d.kl, 1e-4 * (std::abs(d.lse_zt) + std::abs(d.lse_tt) + 1));
}

}  // namespace
}  // namespace dflash
