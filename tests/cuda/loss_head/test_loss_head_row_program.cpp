// The loss head's row kernels run on the CPU: their block programs (cuda/loss_head/row_program.hpp)
// driven over the kernels' real grid and thread partition - one block of kRowThreads threads per
// row, phase by phase between the barriers - against a double reference streamed over the same
// bf16 values. At V = 248320 (the vector path, and the scalar path on the same rows) and at
// V = 1003 and 77 (not multiples of 8: the scalar path; 77 < kRowThreads leaves threads empty).
//
// Each phase is run with its threads in ascending and in descending order: a phase in which one
// thread reads what another writes would give different bits.
//
// The loss head computes the valid rows only (cuda/loss_head/row_gather_program.hpp): the compaction, gather
// and scatter programs run here over their real grids too, and the gathered computation - chunks of
// compact rows, dL/dY scattered back - is held bitwise to the un-gathered one (every row a block),
// row outputs, totals and dL/dY alike.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/tolerances.hpp"
#include "cuda/loss_head/row_gather_program.hpp"
#include "cuda/loss_head/row_program.hpp"
#include "harness/cuda/host_block_exec.hpp"

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
  // lse and token loss start as the launcher leaves them (zeros: the invalid rows' outputs); the
  // rest as a sentinel that no row it is not written for may lose.
  explicit RowOutputs(std::int64_t T)
      : row_stats(kSavedRowStats * T, -1.0f),
        lse(T, 0.0f),
        token_loss(T, 0.0f),
        ce(T, -1.0f),
        kl(T, -1.0f),
        correct(T, 7),
        count(T, -1),
        argmax(T, -1) {}
  DeviceRowOutputs view() {
    return {row_stats.data(), lse.data(), token_loss.data(), ce.data(), kl.data(), correct.data()};
  }
};

// The valid rows as compact_valid_rows_kernel lists them: its program on the host, one block of
// kCompactThreads threads, the shared offsets poisoned.
std::vector<std::int32_t> list_valid_rows(const std::vector<std::uint8_t>& valid, bool descending) {
  const auto T = static_cast<std::int64_t>(valid.size());
  std::vector<std::int32_t> list(valid.size() + 1, -1), offsets(kCompactThreads, -7);
  std::int32_t count = -1;
  HostBlockExec exec(kCompactThreads, descending);
  compact_valid_rows_program(exec, valid.data(), T, offsets.data(), list.data(), &count);
  EXPECT_EQ(list[valid.size()], -1) << "written past the list";
  list.resize(static_cast<std::size_t>(std::max<std::int32_t>(count, 0)));
  return list;
}

// copy_listed_rows_kernel<gather> over one chunk: rows list[0, rows) of src into a compact [rows, cols] array.
template <class T>
std::vector<T> gather_chunk(const std::vector<T>& src, const std::int32_t* list, std::int64_t rows, std::int32_t cols,
                            bool descending) {
  std::vector<T> dst(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    HostBlockExec exec(kGatherThreads, descending);
    copy_listed_row_program<ListedRows::gather>(exec, src.data(), list, r, cols, dst.data());
  }
  return dst;
}

// copy_listed_rows_kernel<scatter> over one chunk: compact rows r < rows of src to rows list[r] of dst.
template <class T>
void scatter_chunk(const std::vector<T>& src, const std::int32_t* list, std::int64_t rows, std::int32_t cols,
                   std::vector<T>& dst, bool descending) {
  for (std::int64_t r = 0; r < rows; ++r) {
    HostBlockExec exec(kGatherThreads, descending);
    copy_listed_row_program<ListedRows::scatter>(exec, src.data(), list, r, cols, dst.data());
  }
}

// One block of hybrid_row_stats_kernel (its program, hybrid_row_stats_program): row zr, tr of global
// row i, as compact row 0 of a one-row chunk listing i. The shared slots poisoned.
void run_row_stats_block(const RowProblem& p, const Bf16Bits* zr, const Bf16Bits* tr, std::int64_t i, bool vector,
                         bool descending, RowOutputs& out) {
  const std::int32_t list[1] = {static_cast<std::int32_t>(i)};
  std::vector<KernelRowStats> partial(kRowThreads);
  for (KernelRowStats& s : partial) s.count = -7;
  HostBlockExec exec(kRowThreads, descending);
  hybrid_row_stats_program(exec, zr, tr, p.vocab, list, p.targets(), p.hw, out.view(), vector, partial.data(), 0);
  out.count[i] = partial[0].count;
  out.argmax[i] = partial[0].argmax;
}

// The un-gathered statistics pass: every valid row a block of its own, in place in the [T, V] logits.
RowOutputs run_row_stats_blocks(const RowProblem& p, bool vector, bool descending) {
  RowOutputs out(p.rows);
  for (std::int64_t r = 0; r < p.rows; ++r) {
    if (p.valid[r] == 0) continue;
    run_row_stats_block(p, p.z.data() + r * p.vocab, p.t.data() + r * p.vocab, r, vector, descending, out);
  }
  return out;
}

// The loss head's statistics pass: chunks of up to C listed rows, each gathered (the logits of
// gathered Y rows are the gathered rows of the logits: a product is row by row), block r of a
// chunk computing global row list[c0 + r].
RowOutputs run_row_stats_gathered(const RowProblem& p, const std::vector<std::int32_t>& list, std::int64_t C,
                                  bool vector, bool descending) {
  RowOutputs out(p.rows);
  const auto n = static_cast<std::int64_t>(list.size());
  for (std::int64_t c0 = 0; c0 < n; c0 += C) {
    const std::int64_t rows = std::min(C, n - c0);
    const std::int32_t* chunk = list.data() + c0;
    const std::vector<Bf16Bits> zc = gather_chunk(p.z, chunk, rows, p.vocab, descending);
    const std::vector<Bf16Bits> tc = gather_chunk(p.t, chunk, rows, p.vocab, descending);
    for (std::int64_t r = 0; r < rows; ++r) {
      run_row_stats_block(p, zc.data() + r * p.vocab, tc.data() + r * p.vocab, global_row_of(chunk, r), vector,
                          descending, out);
    }
  }
  return out;
}

// One block of hybrid_logit_grad_kernel (its program), in place on row zr of global row i.
void run_logit_grad_block(const RowProblem& p, const std::vector<float>& row_stats, Bf16Bits* zr, const Bf16Bits* tr,
                          std::int64_t i, bool vector, bool descending) {
  const std::int32_t list[1] = {static_cast<std::int32_t>(i)};
  HostBlockExec exec(kRowThreads, descending);
  hybrid_logit_grad_program(exec, zr, tr, p.vocab, list, p.targets(), p.hw, row_stats.data(), p.weight_sum, vector, 0);
}

// The un-gathered gradient pass over every row; returns the [T, V] chunk after the in-place update.
std::vector<Bf16Bits> run_logit_grad_blocks(const RowProblem& p, const std::vector<float>& row_stats, bool vector,
                                            bool descending) {
  std::vector<Bf16Bits> z = p.z;
  for (std::int64_t r = 0; r < p.rows; ++r) {
    run_logit_grad_block(p, row_stats, z.data() + r * p.vocab, p.t.data() + r * p.vocab, r, vector, descending);
  }
  return z;
}

// dL/dY = dz W for rows [0, rows) of dz ([rows, V]; W [V, H]), each element a double sum in column
// order: the same arithmetic for a row wherever it sits.
std::vector<float> hidden_grad_of(const std::vector<Bf16Bits>& dz, std::int64_t rows, std::int32_t V,
                                  const std::vector<float>& w, std::int32_t H) {
  std::vector<float> dy(static_cast<std::size_t>(rows * H));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int32_t h = 0; h < H; ++h) {
      double sum = 0;
      for (std::int32_t v = 0; v < V; ++v) {
        sum += double(float_from_bf16_bits(dz[r * V + v])) * w[std::size_t(v) * H + h];
      }
      dy[r * H + h] = static_cast<float>(sum);
    }
  }
  return dy;
}

// The loss head's gradient: per chunk of listed rows, gathered z and t, the gradient pass, dL/dY_c =
// dz_c W, scattered into a zeroed [T, H] dL/dY. Also returns the chunks' dz, concatenated.
struct GatheredGradient {
  std::vector<Bf16Bits> dz;        // [n, V], compact
  std::vector<float> hidden_grad;  // [T, H]
};
GatheredGradient run_logit_grad_gathered(const RowProblem& p, const std::vector<float>& row_stats,
                                         const std::vector<std::int32_t>& list, std::int64_t C,
                                         const std::vector<float>& w, std::int32_t H, bool vector, bool descending) {
  GatheredGradient g;
  g.hidden_grad.assign(static_cast<std::size_t>(p.rows * H), 0.0f);
  const auto n = static_cast<std::int64_t>(list.size());
  for (std::int64_t c0 = 0; c0 < n; c0 += C) {
    const std::int64_t rows = std::min(C, n - c0);
    const std::int32_t* chunk = list.data() + c0;
    std::vector<Bf16Bits> zc = gather_chunk(p.z, chunk, rows, p.vocab, descending);
    const std::vector<Bf16Bits> tc = gather_chunk(p.t, chunk, rows, p.vocab, descending);
    for (std::int64_t r = 0; r < rows; ++r) {
      run_logit_grad_block(p, row_stats, zc.data() + r * p.vocab, tc.data() + r * p.vocab, global_row_of(chunk, r),
                           vector, descending);
    }
    scatter_chunk(hidden_grad_of(zc, rows, p.vocab, w, H), chunk, rows, H, g.hidden_grad, descending);
    g.dz.insert(g.dz.end(), zc.begin(), zc.end());
  }
  return g;
}

// The totals kernel's program: one block of kTotalsThreads threads over all rows.
LossHeadStats<double> totals_of(const RowProblem& p, RowOutputs& out) {
  std::vector<LossHeadStats<double>> partial(kTotalsThreads);
  LossHeadStats<double> totals;
  HostBlockExec exec(kTotalsThreads, false);
  loss_totals_program(exec, out.view(), p.targets(), p.rows, partial.data(), &totals);
  return totals;
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
    if (p.valid[r] == 0) {  // outputs the launcher's zeros; nothing else written for the row
      EXPECT_EQ(out.lse[r], 0.0f);
      EXPECT_EQ(out.token_loss[r], 0.0f);
      for (float x : {out.ce[r], out.kl[r], out.row_stats[3 * r], out.row_stats[3 * r + 1], out.row_stats[3 * r + 2]}) {
        EXPECT_EQ(x, -1.0f);
      }
      EXPECT_EQ(out.correct[r], 7);
      EXPECT_EQ(out.count[r], -1) << "an invalid row was computed";
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
    EXPECT_LE(std::abs(out.token_loss[r] - (h * d.row.ce + s * tau * tau * d.row.kl)),
              (h + s * tau * tau) * bound * d.scale);
  }
}

// Per column: the double gradient from the kernel's own saved statistics, and the fp32 rounding
// the kernel may add. Each term is 2^d with d = x c - lse log2(e) in float (x = z, z/tau or t/tau
// in natural units; c = log2(e) or log2(e)/tau rounded): an error D in d is a relative error
// ln 2 D, and ln 2 log2(e) = 1, so in natural units: p = exp(z - lse z) is off by
// u (|z| + |lse z| + 2 |z - lse z| + 2) relatively (z c, lse c and the subtraction rounded, the
// rounded log2(e) scaling z - lse z, a 2-ulp exp2); p_tau and q by
// u (4 |x/tau| + 2 |lse| + |x/tau - lse| + 2) (log2(e)/tau is three roundings: log2(e), 1/tau,
// their product); the combination by 4 u of its terms; then the bf16 store, 2^-8 relative.
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
      const double pz = std::exp(z - row.lse_z), pt = std::exp(z / tau - row.lse_zt),
                   q = std::exp(t / tau - row.lse_tt);
      const auto tau_term = [&](double x, double lse) {  // x = z/tau or t/tau
        return u * (4 * std::abs(x) + 2 * std::abs(lse) + std::abs(x - lse) + 2);
      };
      const double fp32 = scale * (h * pz * u * (std::abs(z) + std::abs(row.lse_z) + 2 * std::abs(z - row.lse_z) + 2) +
                                   s * tau * (pt * tau_term(z / tau, row.lse_zt) + q * tau_term(t / tau, row.lse_tt)) +
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

  // The loss head's gathered computation: chunks of 2 listed rows (5 valid rows: 2 + 2 + 1, the
  // last chunk shorter) give bitwise what every row in place gives.
  constexpr std::int64_t kChunk = 2;
  const std::vector<std::int32_t> list = list_valid_rows(p.valid, false);
  ASSERT_EQ(list, (std::vector<std::int32_t>{1, 2, 3, 4, 5}));
  RowOutputs gathered = run_row_stats_gathered(p, list, kChunk, c.vector, false);
  const auto outputs = [](const RowOutputs& o) {
    return std::tie(o.row_stats, o.lse, o.token_loss, o.ce, o.kl, o.correct, o.count, o.argmax);
  };
  EXPECT_EQ(outputs(gathered), outputs(up));
  RowOutputs in_place = up;
  const LossHeadStats<double> a = totals_of(p, gathered), b = totals_of(p, in_place);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.ce, b.ce);
  EXPECT_EQ(a.kl, b.kl);
  EXPECT_EQ(a.correct, b.correct);
  EXPECT_EQ(a.valid_rows, b.valid_rows);
  EXPECT_EQ(a.valid_rows, 5);

  constexpr std::int32_t H = 8;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> weight(-1.0f, 1.0f);
  std::vector<float> w(static_cast<std::size_t>(c.vocab) * H);
  for (float& x : w) x = weight(rng);
  const GatheredGradient g = run_logit_grad_gathered(p, up.row_stats, list, kChunk, w, H, c.vector, false);
  for (std::size_t k = 0; k < list.size(); ++k) {
    const auto compact = g.dz.begin() + static_cast<std::ptrdiff_t>(k * c.vocab);
    ASSERT_TRUE(std::equal(compact, compact + c.vocab, dz.begin() + std::ptrdiff_t(list[k]) * c.vocab))
        << "dL/dz of compact row " << k << " (row " << list[k] << ")";
  }
  EXPECT_EQ(g.hidden_grad, hidden_grad_of(dz, p.rows, c.vocab, w, H)) << "dL/dY scattered to the wrong rows";
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

// The compaction program over its real block (1024 threads, each a contiguous share of the rows)
// lists exactly the valid rows, ascending, whatever T (0, 1, below, at and above a multiple of
// 1024) and however many are valid (none, all, some).
TEST(RowGather, CompactionListsTheValidRowsInOrder) {
  std::mt19937 rng(11);
  for (std::int64_t T : {0, 1, 7, 1023, 1024, 1025, 5000}) {
    for (int pattern = 0; pattern < 4; ++pattern) {  // none valid, all, random, all but the first and last
      std::vector<std::uint8_t> valid(static_cast<std::size_t>(T));
      for (std::int64_t i = 0; i < T; ++i) {
        valid[i] = pattern == 0 ? 0 : pattern == 1 ? 1 : pattern == 2 ? rng() % 3 != 0 : (i != 0 && i != T - 1);
      }
      std::vector<std::int32_t> want;
      for (std::int64_t i = 0; i < T; ++i) {
        if (valid[i] != 0) want.push_back(static_cast<std::int32_t>(i));
      }
      for (bool descending : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "T " << T << " pattern " << pattern << " descending " << descending);
        EXPECT_EQ(list_valid_rows(valid, descending), want);
      }
    }
  }
}

// Gather and scatter over their real grid (a block per compact row, 256 threads; 300 columns: more
// than one pass for some threads, none for others' second), chunks of 8 over 37 rows (the last
// chunk shorter): each gathered row is its source row; scattering back restores exactly the
// listed rows and leaves the others, and a guard row past the end, at zero.
TEST(RowGather, GatherThenScatterRestoresTheListedRowsOnly) {
  constexpr std::int64_t T = 37, C = 8;
  constexpr std::int32_t cols = 300;
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::vector<float> src(static_cast<std::size_t>(T * cols));
  for (float& x : src) x = value(rng);
  for (int pattern = 0; pattern < 3; ++pattern) {  // none valid, all, random
    std::vector<std::uint8_t> valid(T);
    for (auto& v : valid) v = pattern == 0 ? 0 : pattern == 1 ? 1 : rng() % 2;
    const std::vector<std::int32_t> list = list_valid_rows(valid, false);
    std::vector<float> back(src.size() + cols, 0.0f);  // and a guard row past the end
    for (bool descending : {false, true}) {
      for (std::int64_t c0 = 0; c0 < std::int64_t(list.size()); c0 += C) {
        const std::int64_t rows = std::min<std::int64_t>(C, std::int64_t(list.size()) - c0);
        const std::vector<float> chunk = gather_chunk(src, list.data() + c0, rows, cols, descending);
        for (std::int64_t r = 0; r < rows; ++r) {
          ASSERT_TRUE(std::equal(chunk.begin() + r * cols, chunk.begin() + (r + 1) * cols,
                                 src.begin() + std::int64_t(list[c0 + r]) * cols))
              << "chunk at " << c0 << " row " << r;
        }
        scatter_chunk(chunk, list.data() + c0, rows, cols, back, descending);
      }
      for (std::int64_t i = 0; i <= T; ++i) {
        for (std::int32_t c = 0; c < cols; ++c) {
          ASSERT_EQ(back[i * cols + c], i < T && valid[i] != 0 ? src[i * cols + c] : 0.0f)
              << "pattern " << pattern << " row " << i << " column " << c;
        }
      }
    }
  }
}

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
