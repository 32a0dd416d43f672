// The loss head's row kernels run on the CPU: their phase functions (cuda/loss_head_row_phases.hpp)
// driven over the kernels' real grid and thread partition - one block of kRowThreads threads per
// row, phase by phase between the barriers - against a double reference streamed over the same
// bf16 values. At V = 248320 (the vector path, and the scalar path on the same rows) and at
// V = 1003 and 77 (not multiples of 8: the scalar path; 77 < kRowThreads leaves threads empty).
//
// Each phase is run with its threads in ascending and in descending order: a phase in which one
// thread reads what another writes would give different bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "common/tolerances.hpp"
#include "cuda/loss_head_row_phases.hpp"

namespace dflash {
namespace {

constexpr double kBf16Unit = 1.0 / 256;  // bf16 keeps 8 significant bits: round to nearest is off by <= 2^-8

struct RowProblem {
  std::int64_t rows = 0;
  std::int32_t vocab = 0;
  std::vector<Bf16Bits> z, t;  // [rows, V] logits chunk (row0 = 0)
  std::vector<std::int64_t> labels;
  std::vector<float> weights;
  std::vector<std::uint8_t> valid;
  HybridWeights hw{0.85f, 0.15f, 1.0f};
  float weight_sum = 0;
  DeviceRowTargets targets() const { return {labels.data(), weights.data(), valid.data()}; }
  float z_at(std::int64_t r, std::int32_t v) const { return float_from_bf16_bits(z[r * vocab + v]); }
  float t_at(std::int64_t r, std::int32_t v) const { return float_from_bf16_bits(t[r * vocab + v]); }
};

// Rows: 0 invalid (its logits NaN: they must never be read), 1 ordinary, 2 label in the last
// column, 3 maximum in the last column (the scalar tail / the last vector group), 4 a tie for the
// maximum across two threads (the lowest index must win), 5 valid with weight 0.
RowProblem make_problem(std::int32_t V, float tau, std::uint32_t seed) {
  RowProblem p;
  p.rows = 6;
  p.vocab = V;
  p.hw.tau = tau;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> logit(-6.0f, 6.0f);
  p.z.resize(static_cast<std::size_t>(p.rows) * V);
  p.t.resize(p.z.size());
  for (std::size_t e = 0; e < p.z.size(); ++e) {
    p.z[e] = bf16_bits_from_float(logit(rng));
    p.t[e] = bf16_bits_from_float(logit(rng));
  }
  const Bf16Bits nan = bf16_bits_from_float(std::numeric_limits<float>::quiet_NaN());
  std::fill_n(p.z.begin(), V, nan);
  std::fill_n(p.t.begin(), V, nan);
  p.z[3 * std::size_t(V) + V - 1] = bf16_bits_from_float(20.0f);
  const std::int32_t low = std::min<std::int32_t>(7, V - 2), high = std::min<std::int32_t>(300, V - 1);
  p.z[4 * std::size_t(V) + high] = p.z[4 * std::size_t(V) + low] = bf16_bits_from_float(25.0f);
  p.labels = {-5, std::int64_t(rng() % V), V - 1, V - 1, low, 3};
  p.valid = {0, 1, 1, 1, 1, 1};
  p.weights = {0.0f, 1.0f, 0.5f, 0.75f, 0.25f, 0.0f};
  for (float w : p.weights) p.weight_sum += w;
  return p;
}

struct RowOutputs {
  std::vector<float> row_stats, lse, token_loss, ce, kl;
  std::vector<std::uint8_t> correct;
  std::vector<std::int32_t> count, argmax;  // what the merged statistics hold (the test looks inside)
  explicit RowOutputs(std::int64_t T)
      : row_stats(kSavedRowStats * T, -1.0f), lse(T, -1.0f), token_loss(T, -1.0f), ce(T, -1.0f), kl(T, -1.0f),
        correct(T, 7), count(T, -1), argmax(T, -1) {}
  DeviceRowOutputs view() { return {row_stats.data(), lse.data(), token_loss.data(), ce.data(), kl.data(), correct.data()}; }
};

template <class F>
void each_thread(int threads, bool descending, F&& f) {
  for (int k = 0; k < threads; ++k) f(descending ? threads - 1 - k : k);
}

// hybrid_row_stats_kernel, block by block, phase by phase.
RowOutputs run_row_stats_blocks(const RowProblem& p, bool vector, bool descending) {
  RowOutputs out(p.rows);
  const DeviceRowOutputs view = out.view();
  const RowScales sc = row_scales(p.hw);
  for (std::int64_t r = 0; r < p.rows; ++r) {  // grid: one block per row
    if (p.valid[r] == 0) {
      write_invalid_row_outputs(r, view);
      continue;
    }
    const auto label = static_cast<std::int32_t>(p.labels[r]);
    std::vector<KernelRowStats> partial(kRowThreads);
    each_thread(kRowThreads, descending, [&](int j) {
      partial[j] = row_stats_thread_partial(p.z.data() + r * p.vocab, p.t.data() + r * p.vocab, p.vocab, label, sc, j,
                                            vector);
    });
    for (int half = kRowThreads / 2; half > 0; half /= 2) {
      each_thread(kRowThreads, descending, [&](int j) { merge_tree_level(partial.data(), half, j); });
    }
    write_row_outputs(partial[0], r, label, p.hw, sc, view);
    out.count[r] = partial[0].count;
    out.argmax[r] = partial[0].argmax;
  }
  return out;
}

// hybrid_logit_grad_kernel: one phase per block; returns the chunk after the in-place update.
std::vector<Bf16Bits> run_logit_grad_blocks(const RowProblem& p, const std::vector<float>& row_stats, bool vector,
                                            bool descending) {
  std::vector<Bf16Bits> z = p.z;
  const DeviceRowTargets in = p.targets();
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const float scale = row_logit_grad_scale(in, r, p.weight_sum);
    const std::int32_t label = scale == 0.0f ? -1 : static_cast<std::int32_t>(p.labels[r]);
    const HybridRowResult<float> row = scale == 0.0f ? HybridRowResult<float>{} : load_row_stats(row_stats.data(), r);
    each_thread(kRowThreads, descending, [&](int j) {
      logit_grad_thread(z.data() + r * p.vocab, p.t.data() + r * p.vocab, p.vocab, label, row, p.hw, row_scales(p.hw),
                        scale, j, vector);
    });
  }
  return z;
}

struct DoubleRow {
  HybridRowResult<double> row;
  std::int64_t argmax;
  double scale;  // 1 + |lse z| + |lse z/tau| + |lse t/tau| + max |t - z| / tau
};

DoubleRow double_row(const RowProblem& p, std::int64_t r) {
  const double tau = p.hw.tau;
  HybridRowStats<double> s;
  double spread = 0;
  for (std::int32_t v = 0; v < p.vocab; ++v) {
    s.update(p.z_at(r, v), p.t_at(r, v), v, p.labels[r], tau);
    spread = std::max(spread, std::abs(double(p.t_at(r, v)) - p.z_at(r, v)) / tau);
  }
  const HybridRowResult<double> row = finish_row(s, tau);
  return {row, s.argmax, 1 + std::abs(row.lse_z) + std::abs(row.lse_zt) + std::abs(row.lse_tt) + spread};
}

void expect_row_stats_within_fp32_bound(const RowProblem& p, const RowOutputs& out) {
  const double bound = fp32_row_stats_bound(p.vocab, kRowThreads);
  const double h = p.hw.hard, s = p.hw.soft, tau = p.hw.tau;
  for (std::int64_t r = 0; r < p.rows; ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    if (p.valid[r] == 0) {
      for (float x : {out.lse[r], out.token_loss[r], out.ce[r], out.kl[r], out.row_stats[3 * r], out.row_stats[3 * r + 1],
                      out.row_stats[3 * r + 2]}) {
        EXPECT_EQ(x, 0.0f);
      }
      EXPECT_EQ(out.correct[r], 0);
      continue;
    }
    const DoubleRow d = double_row(p, r);
    EXPECT_EQ(out.count[r], p.vocab) << "every column absorbed exactly once";
    EXPECT_EQ(out.argmax[r], d.argmax) << "argmax, ties to the lowest index";
    EXPECT_EQ(out.correct[r], d.argmax == p.labels[r] ? 1 : 0);
    const HybridRowResult<float> saved = load_row_stats(out.row_stats.data(), r);
    EXPECT_EQ(saved.lse_z, out.lse[r]);
    EXPECT_LE(std::abs(saved.lse_z - d.row.lse_z), bound * d.scale);
    EXPECT_LE(std::abs(saved.lse_zt - d.row.lse_zt), bound * d.scale);
    EXPECT_LE(std::abs(saved.lse_tt - d.row.lse_tt), bound * d.scale);
    EXPECT_LE(std::abs(out.ce[r] - d.row.ce), bound * d.scale);
    EXPECT_LE(std::abs(out.kl[r] - d.row.kl), bound * d.scale);
    EXPECT_LE(std::abs(out.token_loss[r] - (h * d.row.ce + s * tau * tau * d.row.kl)), (h + s * tau * tau) * bound * d.scale);
  }
}

// Per column: the double gradient from the kernel's own saved statistics, and the fp32 rounding
// the kernel may add: p = exp(z - lse z) is off by u (|z| + |lse z| + 3) relatively (the
// subtraction, a 2-ulp exp), p_tau and q by u (3 |x/tau| + |lse| + 3) (x/tau by a rounded 1/tau
// too), the combination by 4 u of its terms; then the bf16 store, 2^-8 relative.
void expect_gradient_within_fp32_bound(const RowProblem& p, const std::vector<float>& row_stats,
                                       const std::vector<Bf16Bits>& dz) {
  const double u = kFp32Unit, h = p.hw.hard, s = p.hw.soft, tau = p.hw.tau;
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const double scale = p.valid[r] != 0 ? double(row_grad_scale(p.weights[r], p.weight_sum)) : 0.0;
    if (scale == 0.0) {
      for (std::int32_t v = 0; v < p.vocab; ++v) ASSERT_EQ(dz[r * p.vocab + v], 0) << "row " << r << " column " << v;
      continue;
    }
    const HybridRowResult<float> f = load_row_stats(row_stats.data(), r);
    const HybridRowResult<double> row{f.lse_z, f.lse_zt, f.lse_tt, 0, 0};
    for (std::int32_t v = 0; v < p.vocab; ++v) {
      const double z = p.z_at(r, v), t = p.t_at(r, v);
      const double want = hybrid_logit_grad(z, teacher_log_prob(t, row, tau), v == p.labels[r], row, tau, h, s, scale);
      const double pz = std::exp(z - row.lse_z), pt = std::exp(z / tau - row.lse_zt), q = std::exp(t / tau - row.lse_tt);
      const double fp32 = scale * (h * pz * u * (std::abs(z) + std::abs(row.lse_z) + 3) +
                                   s * tau * (pt * u * (3 * std::abs(z / tau) + std::abs(row.lse_zt) + 3) +
                                              q * u * (3 * std::abs(t / tau) + std::abs(row.lse_tt) + 3)) +
                                   4 * u * (h * (pz + 1) + s * tau * (pt + q)));
      const double got = float_from_bf16_bits(dz[r * p.vocab + v]);
      ASSERT_LE(std::abs(got - want), fp32 * (1 + 2 * kBf16Unit) + kBf16Unit * std::abs(want))
          << "row " << r << " column " << v << ": " << got << " vs " << want;
    }
  }
}

struct PhaseCase {
  std::int32_t vocab;
  bool vector;
  float tau;
};

class RowKernelPhases : public ::testing::TestWithParam<PhaseCase> {};

TEST_P(RowKernelPhases, StatisticsAndGradientMatchTheDoubleReferenceOverTheRealPartition) {
  const PhaseCase c = GetParam();
  const RowProblem p = make_problem(c.vocab, c.tau, 1000u + static_cast<std::uint32_t>(c.vocab));
  const RowOutputs up = run_row_stats_blocks(p, c.vector, false);
  const RowOutputs down = run_row_stats_blocks(p, c.vector, true);
  EXPECT_EQ(up.row_stats, down.row_stats) << "a phase's threads depend on each other's order";
  EXPECT_EQ(up.token_loss, down.token_loss);
  expect_row_stats_within_fp32_bound(p, up);

  const std::vector<Bf16Bits> dz = run_logit_grad_blocks(p, up.row_stats, c.vector, false);
  EXPECT_EQ(dz, run_logit_grad_blocks(p, up.row_stats, c.vector, true));
  expect_gradient_within_fp32_bound(p, up.row_stats, dz);
}

INSTANTIATE_TEST_SUITE_P(Partitions, RowKernelPhases,
                         ::testing::Values(PhaseCase{248320, true, 1.0f}, PhaseCase{248320, true, 0.7f},
                                           PhaseCase{248320, false, 0.7f}, PhaseCase{1003, false, 1.0f},
                                           PhaseCase{1003, false, 1.6f}, PhaseCase{77, false, 0.7f}),
                         [](const ::testing::TestParamInfo<PhaseCase>& info) {
                           std::ostringstream name;  // (not string operator+: GCC 12 -O3 warns falsely, -Wrestrict)
                           name << "V" << info.param.vocab << (info.param.vector ? "_vector" : "_scalar") << "_tau"
                                << static_cast<int>(info.param.tau * 10);
                           return name.str();
                         });

TEST(RowKernelPhases, WidenAndNarrowKeepColumnOrderAndBits) {
  std::vector<Bf16Bits> columns(8);
  for (int k = 0; k < 8; ++k) columns[k] = bf16_bits_from_float(1.5f * float(k + 1) - 0.25f);
  std::uint32_t words[4];
  load8(columns.data(), words);
  const Bf16x8 wide = widen8(words);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(wide.v[k], float_from_bf16_bits(columns[k])) << k;
  std::uint32_t back[4];
  narrow8(wide, back);
  std::vector<Bf16Bits> stored(8);
  store8(stored.data(), back);
  EXPECT_EQ(stored, columns);
}

// The totals kernel's tree over LossHeadStats equals the rows added one by one (counts and the
// magnitude exactly; the weighted sums to double rounding).
TEST(RowKernelPhases, TotalsTreeEqualsTheSequentialSum) {
  const std::int64_t T = 2000;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  std::vector<float> stats(kSavedRowStats * T), token_loss(T), ce(T), kl(T), weights(T);
  std::vector<std::uint8_t> correct(T), valid(T);
  std::vector<std::int64_t> labels(T, 0);
  LossHeadStats<double> sequential;
  double size = 0;  // sum of |w l| + |w ce| + |w kl|: what reordering the sums may cost ulps of
  for (std::int64_t i = 0; i < T; ++i) {
    valid[i] = i % 5 != 0;
    weights[i] = valid[i] ? std::abs(value(rng)) : 0.0f;
    for (int k = 0; k < kSavedRowStats; ++k) stats[kSavedRowStats * i + k] = value(rng);
    token_loss[i] = value(rng);
    ce[i] = value(rng);
    kl[i] = value(rng);
    correct[i] = rng() % 2;
    if (valid[i] == 0) continue;
    const HybridRowResult<double> row{stats[3 * i], stats[3 * i + 1], stats[3 * i + 2], ce[i], kl[i]};
    sequential.add_row(weights[i], token_loss[i], row, correct[i] != 0);
    size += weights[i] * (std::abs(token_loss[i]) + std::abs(ce[i]) + std::abs(kl[i]));
  }
  const double reorder = size * double(T) * std::numeric_limits<double>::epsilon();
  const DeviceRowOutputs out{stats.data(), nullptr, token_loss.data(), ce.data(), kl.data(), correct.data()};
  const DeviceRowTargets in{labels.data(), weights.data(), valid.data()};
  std::vector<LossHeadStats<double>> partial(kTotalsThreads);
  for (int j = 0; j < kTotalsThreads; ++j) partial[j] = totals_thread_partial(out, in, T, j);
  for (int half = kTotalsThreads / 2; half > 0; half /= 2) {
    for (int j = 0; j < kTotalsThreads; ++j) totals_tree_level(partial.data(), half, j);
  }
  const LossHeadStats<double>& tree = partial[0];
  EXPECT_EQ(tree.correct, sequential.correct);
  EXPECT_EQ(tree.valid_rows, sequential.valid_rows);
  EXPECT_EQ(tree.magnitude, sequential.magnitude);
  EXPECT_NEAR(tree.loss, sequential.loss, reorder);
  EXPECT_NEAR(tree.ce, sequential.ce, reorder);
  EXPECT_NEAR(tree.kl, sequential.kl, reorder);
}

}  // namespace
}  // namespace dflash
