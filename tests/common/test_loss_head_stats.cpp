// LossHeadStats (common/loss_head_stats.hpp): the one way every implementation sums the loss
// head's statistics. Per row it adds w l, w ce, w kl and keeps the largest row magnitude
// 1 + |lse z| + |lse z/tau| + |lse t/tau| (the quantity the field's comment names, which the CUDA
// totals once replaced by a weighted mean); finish divides by the global W; merging finished
// per-sequence statistics gives the finished statistics of all rows.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/loss_head_stats.hpp"

namespace dflash {
namespace {

struct WeightedRow {
  double w, loss;
  HybridRowResult<double> r;
  bool correct;
};

std::vector<WeightedRow> random_rows(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-4.0, 4.0);
  std::vector<WeightedRow> rows;
  for (int i = 0; i < n; ++i) {
    rows.push_back({std::abs(u(rng)), u(rng), {u(rng), u(rng), u(rng), u(rng), u(rng)}, rng() % 2 == 0});
  }
  return rows;
}

TEST(LossHeadStats, OneRowAddsItsWeightedTermsAndItsMagnitude) {
  LossHeadStats<double> s;
  const HybridRowResult<double> row{-2.5, 3.0, -0.25, 1.5, 0.75};
  s.add_row(2.0, 4.0, row, true);
  EXPECT_EQ(s.loss, 8.0);
  EXPECT_EQ(s.ce, 3.0);
  EXPECT_EQ(s.kl, 1.5);
  EXPECT_EQ(s.magnitude, 1 + 2.5 + 3.0 + 0.25);
  EXPECT_EQ(s.correct, 1);
  EXPECT_EQ(s.valid_rows, 1);
  s.finish(4.0);
  EXPECT_EQ(s.loss, 2.0);
  EXPECT_EQ(s.ce, 0.75);
  EXPECT_EQ(s.kl, 0.375);
  EXPECT_EQ(s.magnitude, 6.75) << "finish divides the sums, not the magnitude";
}

TEST(LossHeadStats, MagnitudeIsTheLargestRowsNotAnAverage) {
  LossHeadStats<double> s;
  s.add_row(1.0, 0.0, {1.0, 1.0, 1.0, 0, 0}, false);
  s.add_row(100.0, 0.0, {0.0, 0.0, 0.0, 0, 0}, false);
  s.finish(101.0);
  EXPECT_EQ(s.magnitude, 4.0);
}

TEST(LossHeadStats, MergingFinishedSequencesEqualsFinishingAllRows) {
  const std::vector<WeightedRow> rows = random_rows(300, 7);
  double W = 0;
  for (const WeightedRow& r : rows) W += r.w;
  LossHeadStats<double> all, merged;
  for (const WeightedRow& r : rows) all.add_row(r.w, r.loss, r.r, r.correct);
  all.finish(W);
  double size = 0;
  for (std::size_t b = 0; b < rows.size(); b += 100) {  // three sequences
    LossHeadStats<double> seq;
    for (std::size_t i = b; i < b + 100; ++i) seq.add_row(rows[i].w, rows[i].loss, rows[i].r, rows[i].correct);
    seq.finish(W);
    merged.merge(seq);
  }
  for (const WeightedRow& r : rows) size += r.w * (std::abs(r.loss) + std::abs(r.r.ce) + std::abs(r.r.kl)) / W;
  const double reorder = size * rows.size() * std::numeric_limits<double>::epsilon();
  EXPECT_NEAR(merged.loss, all.loss, reorder);
  EXPECT_NEAR(merged.ce, all.ce, reorder);
  EXPECT_NEAR(merged.kl, all.kl, reorder);
  EXPECT_EQ(merged.magnitude, all.magnitude);
  EXPECT_EQ(merged.correct, all.correct);
  EXPECT_EQ(merged.valid_rows, all.valid_rows);
  EXPECT_EQ(merged.accuracy(), double(all.correct) / 300);
}

TEST(LossHeadStats, ZeroGlobalWeightFinishesToZeroSums) {
  LossHeadStats<double> s;
  s.add_row(0.0, 3.0, {1, 1, 1, 2, 0.5}, true);
  s.finish(0.0);
  EXPECT_EQ(s.loss, 0.0);
  EXPECT_EQ(s.ce, 0.0);
  EXPECT_EQ(s.kl, 0.0);
  EXPECT_EQ(s.valid_rows, 1);
  EXPECT_EQ(s.accuracy(), 1.0);
}

}  // namespace
}  // namespace dflash
