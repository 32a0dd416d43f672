// The benchmark's full-scale correctness gate, host side (bench/cuda/full_scale_gate.hpp), on a small
// problem where the whole double reference and the plain bf16 emulation can run: the sampled
// rows' exact values are the reference's, their plain values the emulation's, the reference
// passes the gate, and a result with a row's gradient taken from its neighbour fails.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "bench/cuda/full_scale_gate.hpp"
#include "common/tolerances.hpp"
#include "io/errors.hpp"
#include "reference/bf16_emulation.hpp"
#include "reference/compare.hpp"
#include "reference/hybrid_loss.hpp"
#include "reference/linalg.hpp"

namespace dflash {
namespace {

// The benchmark's rows: blocks of 16, k = 0 unlabelled. The loss head computes the valid rows
// only, so chunk edges and the overflow row are positions p among them: global row
// p / 15 * 16 + p % 15 + 1.
TEST(FullScaleGate, SamplesChunkEdgesTheInt32OverflowRowAndTheLastRowAmongTheValidRows) {
  const std::vector<std::int64_t> chunks = {2048, 512};
  std::vector<std::uint8_t> valid(32768);
  for (std::size_t i = 0; i < valid.size(); ++i) valid[i] = i % 16 != 0;
  const std::vector<std::int64_t> rows = gate_sample_rows(valid, 248320, chunks);
  EXPECT_LE(rows.size(), std::size_t(kGateMaxRows));
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_EQ(std::adjacent_find(rows.begin(), rows.end()), rows.end());
  const auto global_row = [](std::int64_t p) { return p / 15 * 16 + p % 15 + 1; };
  for (std::int64_t want : {std::int64_t(0), std::int64_t(32752), global_row(30719), global_row(8648), global_row(2047),
                            global_row(2048), global_row(511), global_row(512)}) {
    EXPECT_NE(std::find(rows.begin(), rows.end(), want), rows.end()) << want;
  }
  EXPECT_EQ(global_row(30719), 32767);
  // 8648 V < 2^31 <= 8649 V: row 8648's logits straddle the 32-bit flat index limit.
  EXPECT_LT(8648LL * 248320, 1LL << 31);
  EXPECT_GE(8649LL * 248320, 1LL << 31);
}

// materialize's products over the 30720 valid rows are cut into cuBLAS calls at 7680, 15360 and
// 23040 (tests/cuda/gemm/test_cublas_gemm_call.cpp): the rows on both sides of each cut are
// checked, beside every chunk edge, none dropped for room.
TEST(FullScaleGate, SamplesBothSidesOfEveryCublasCallCutAndDropsNoWantedRow) {
  const std::vector<std::int64_t> chunks = {2048, 512}, starts = {7680, 15360, 23040};
  std::vector<std::uint8_t> valid(32768);
  for (std::size_t i = 0; i < valid.size(); ++i) valid[i] = i % 16 != 0;
  const std::vector<std::int64_t> rows = gate_sample_rows(valid, 248320, chunks, starts);
  const auto global_row = [](std::int64_t p) { return p / 15 * 16 + p % 15 + 1; };
  std::vector<std::int64_t> want = {0, 32752};
  for (std::int64_t p : {std::int64_t(1), std::int64_t(30718), std::int64_t(30719), std::int64_t(8647),
                         std::int64_t(8648), std::int64_t(8649)}) {
    want.push_back(global_row(p));
  }
  for (std::int64_t c : chunks) {
    for (std::int64_t p : {c - 1, c, c + 1, 30720 - c - 1, 30720 - c + 1}) want.push_back(global_row(p));
  }
  for (std::int64_t s : starts) {
    for (std::int64_t p : {s - 1, s, s + 1}) want.push_back(global_row(p));
  }
  for (std::int64_t r : want) EXPECT_NE(std::find(rows.begin(), rows.end(), r), rows.end()) << r;
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  EXPECT_EQ(rows, want) << "exactly the wanted rows";
  EXPECT_GT(rows.size(), 16u) << "more than the earlier cap of 16";
}

TEST(FullScaleGate, MoreWantedRowsThanTheCapAreRefusedNotDropped) {
  std::vector<std::uint8_t> valid(32768, 1);
  std::vector<std::int64_t> chunks;
  for (std::int64_t c = 100; c < 100 + 100 * kGateMaxRows; c += 100) chunks.push_back(c);
  EXPECT_THROW(gate_sample_rows(valid, 248320, chunks), InputError);
}

class FullScaleGateSmall : public ::testing::Test {
 protected:
  void SetUp() override {
    const LossHeadProblem<double> exact =
        make_loss_head_problem<double>(tracker_, {.rows = 24, .hidden = 16, .vocab = 600, .seed = 31});
    p_.emplace(round_to_device_formats(tracker_, exact));
    options_.temperature = 0.8;
    reference_.emplace(hybrid_loss_unchunked(tracker_, options_, p_->hidden, p_->targets(), p_->weight_sum));
    plain_.emplace(hybrid_loss_bf16_emulation(tracker_, options_, *p_));
    const std::int64_t V = p_->lm_head.dim(0), H = p_->hidden.dim(1);
    // The first unlabelled row, the first two labelled ones and the last two labelled ones.
    std::vector<std::int64_t> labelled;
    for (std::int64_t i = 0; i < p_->hidden.dim(0); ++i) {
      if (p_->valid[i])
        labelled.push_back(i);
      else if (unlabelled_ < 0)
        unlabelled_ = i;
    }
    ASSERT_GE(unlabelled_, 0);
    ASSERT_GE(labelled.size(), 4u);
    rows_ = {labelled[0], labelled[1], unlabelled_, labelled[labelled.size() - 2], labelled.back()};
    std::sort(rows_.begin(), rows_.end());
    std::vector<double> z, t;
    for (std::int64_t i : rows_) {
      for (std::int64_t v = 0; v < V; ++v) {
        z.push_back(dot(p_->hidden.row(i), p_->lm_head.row(v), H));
        // the gate never reads an unlabelled row's teacher (the problem poisons it with NaN)
        t.push_back(p_->valid[i] ? dot(p_->teacher_hidden.row(i), p_->lm_head.row(v), H) : 0.0);
      }
    }
    std::vector<float> weights(p_->weights.begin(), p_->weights.end());
    gate_ = gate_rows_from_logits(rows_, z, t, V, H, p_->labels, weights, p_->valid, p_->weight_sum,
                                  hybrid_hyper<double>(options_));
    gate_.hidden_grad = times_head(gate_.dz);
    gate_.plain_hidden_grad = times_head(gate_.plain_dz);
  }

  // dz [n, V] W [V, H] in double, as bench/cuda/fp64_rows.hpp does on the device.
  std::vector<double> times_head(const std::vector<double>& dz) const {
    const std::int64_t V = p_->lm_head.dim(0), H = p_->hidden.dim(1);
    std::vector<double> out(rows_.size() * H, 0.0);
    for (std::size_t j = 0; j < rows_.size(); ++j)
      matmul_ab_accumulate(&dz[j * V], p_->lm_head.data(), &out[j * H], 1, H, V);
    return out;
  }

  // What the reference itself reports on the sampled rows, as a CUDA run would be observed.
  GateObserved reference_observed() const {
    const std::int64_t H = p_->hidden.dim(1);
    GateObserved o;
    for (std::int64_t i : rows_) {
      o.lse.push_back(static_cast<float>(reference_->lse[i]));
      o.token_loss.push_back(static_cast<float>(reference_->token_loss[i]));
      for (std::int64_t k = 0; k < H; ++k)
        o.hidden_grad.push_back(static_cast<float>(reference_->hidden_grad.row(i)[k]));
    }
    return o;
  }

  MemoryTracker tracker_;
  LossHeadOptions options_;
  std::optional<LossHeadProblem<double>> p_;
  std::optional<LossHeadResult<double>> reference_;
  std::optional<Bf16Emulation> plain_;
  std::vector<std::int64_t> rows_;
  std::int64_t unlabelled_ = -1;
  GateRows gate_;
};

TEST_F(FullScaleGateSmall, ExactAndPlainValuesAreTheReferencesAndTheEmulations) {
  const std::int64_t H = p_->hidden.dim(1);
  int valid = 0;
  for (std::size_t j = 0; j < rows_.size(); ++j) {
    const std::int64_t i = rows_[j];
    ASSERT_EQ(gate_.valid[j], p_->valid[i]);
    if (p_->valid[i] == 0) continue;
    ++valid;
    EXPECT_LE(scalar_relative_error(gate_.lse[j], reference_->lse[i], 1.0), kReferenceTolerance) << i;
    EXPECT_LE(scalar_relative_error(gate_.token_loss[j], reference_->token_loss[i], 1.0), kReferenceTolerance) << i;
    EXPECT_LE(scalar_relative_error(gate_.plain_lse[j], plain_->result.lse[i], 1.0), kReferenceTolerance) << i;
    EXPECT_LE(scalar_relative_error(gate_.plain_token_loss[j], plain_->result.token_loss[i], 1.0), kReferenceTolerance)
        << i;
    EXPECT_LE(relative_error(std::span<const double>(&gate_.hidden_grad[j * H], H),
                             std::span<const double>(reference_->hidden_grad.row(i), H)),
              kReferenceTolerance)
        << i;
    EXPECT_LE(relative_error(std::span<const double>(&gate_.plain_hidden_grad[j * H], H),
                             std::span<const double>(plain_->result.hidden_grad.row(i), H)),
              kReferenceTolerance)
        << i;
  }
  EXPECT_GE(valid, 3) << "the sample must hold labelled rows";
}

TEST_F(FullScaleGateSmall, TheReferencePassesAndANeighboursGradientFails) {
  GateObserved o = reference_observed();
  const Bf16RuleReport pass = check_full_scale_gate(gate_, o);
  EXPECT_TRUE(pass.ok()) << pass.describe();

  // An index bug: the last sampled row's dL/dY is its predecessor's (both labelled).
  const std::size_t H = static_cast<std::size_t>(p_->hidden.dim(1)), n = rows_.size();
  ASSERT_TRUE(gate_.valid[n - 1] && gate_.valid[n - 2]);
  std::copy_n(&o.hidden_grad[(n - 2) * H], H, &o.hidden_grad[(n - 1) * H]);
  const Bf16RuleReport fail = check_full_scale_gate(gate_, o);
  EXPECT_FALSE(fail.ok());
  EXPECT_NE(fail.describe().find("hidden_grad: error"), std::string::npos);
}

// Any output of an unlabelled row: its lse, its token loss, the first or the last entry of its
// dL/dY.
TEST_F(FullScaleGateSmall, AnUnlabelledRowWithAnyNonZeroOutputFails) {
  const std::size_t j = static_cast<std::size_t>(std::find(rows_.begin(), rows_.end(), unlabelled_) - rows_.begin());
  ASSERT_EQ(gate_.valid[j], 0);
  const std::size_t H = static_cast<std::size_t>(p_->hidden.dim(1));
  for (int which = 0; which < 4; ++which) {
    SCOPED_TRACE(which);
    GateObserved o = reference_observed();
    float& planted = which == 0   ? o.lse[j]
                     : which == 1 ? o.token_loss[j]
                     : which == 2 ? o.hidden_grad[j * H]
                                  : o.hidden_grad[j * H + H - 1];
    planted = 1e-30f;
    const Bf16RuleReport report = check_full_scale_gate(gate_, o);
    EXPECT_FALSE(report.ok());
    EXPECT_NE(report.describe().find("unlabelled_rows_zero"), std::string::npos);
  }
}

// The rule measures a result against the exact values: one 1.5 times as far from them as the
// plain computation, on the side away from the plain values, passes (against the plain values it
// would be 2.5 times the plain error), and one 3 times as far fails.
TEST_F(FullScaleGateSmall, ErrorsAreMeasuredAgainstTheExactValues) {
  for (const double factor : {1.5, 3.0}) {
    SCOPED_TRACE(factor);
    GateObserved o;
    auto away = [&](double exact, double plain) { return static_cast<float>(exact - factor * (plain - exact)); };
    for (std::size_t j = 0; j < rows_.size(); ++j) {
      o.lse.push_back(gate_.valid[j] ? away(gate_.lse[j], gate_.plain_lse[j]) : 0.0f);
      o.token_loss.push_back(gate_.valid[j] ? away(gate_.token_loss[j], gate_.plain_token_loss[j]) : 0.0f);
    }
    for (std::size_t e = 0; e < gate_.hidden_grad.size(); ++e) {
      o.hidden_grad.push_back(away(gate_.hidden_grad[e], gate_.plain_hidden_grad[e]));
    }
    const Bf16RuleReport report = check_full_scale_gate(gate_, o);
    EXPECT_EQ(report.ok(), factor < 2) << report.describe();
    // the power of the case: where the plain error is above twice the floor, the errors measured
    // against the plain values (2.5 times it) would break the bound 2 x plain + floor
    bool telling = false;
    for (const ToleranceEntry& e : report.entries) telling = telling || e.plain_error > 2 * e.floor;
    EXPECT_TRUE(telling) << "every plain error is within twice the floor: " << report.describe();
  }
}

}  // namespace
}  // namespace dflash
