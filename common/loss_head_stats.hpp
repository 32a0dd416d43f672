// The loss head's batch statistics (SPEC §5) and how they are summed: per row (add_row), per
// sequence or rank (merge), and divided by the global weight sum W once (finish). Every
// implementation (reference, CUDA, the bf16 emulation, verify, the drafter step, the golden
// checks) sums through these three functions, so a statistic means the same everywhere.
//
// Because W is global (SPEC §5), finish is linear: merging finished per-sequence statistics gives
// the finished statistics of the batch, which is how the drafter step and the goldens add
// sequences.
#pragma once

#include <cstdint>

#include "common/hd.hpp"
#include "common/row_stats.hpp"

namespace dflash {

template <class Real>
struct LossHeadStats {
  // Before finish: sum w l, sum w ce, sum w kl over the rows added; after: the same over W.
  Real loss{0};
  Real ce{0};
  Real kl{0};
  // max over labelled rows of 1 + |lse(z)| + |lse(z/tau)| + |lse(t/tau)|: the size of the terms
  // that a row's lse, ce and kl are made of. Their rounding error is a few ulps of this whatever
  // their own size: a KL near 0 between sharp distributions is a difference of numbers of size
  // max|logit|/tau, and lse = max + log(sum) is off by ~eps in absolute terms even when it is ~0
  // (the 1). Losses and lse are compared relative to it (reference/loss_head_compare.hpp).
  Real magnitude{0};
  std::int64_t correct = 0;     // sum w01 [argmax z = y]
  std::int64_t valid_rows = 0;  // sum w01

  // Row i (valid) with weight w, token loss l_i, its finished statistics, and whether argmax z = y.
  DFLASH_HD void add_row(const Real& w, const Real& token_loss, const HybridRowResult<Real>& row, bool is_correct) {
    loss += w * token_loss;
    ce += w * row.ce;
    kl += w * row.kl;
    const Real size = Real(1) + abs_hd(row.lse_z) + abs_hd(row.lse_zt) + abs_hd(row.lse_tt);
    if (size > magnitude) magnitude = size;
    correct += is_correct ? 1 : 0;
    valid_rows += 1;
  }

  // Adds the statistics of other rows (another thread's, chunk's, sequence's or rank's); both
  // finished or both not.
  DFLASH_HD void merge(const LossHeadStats& other) {
    loss += other.loss;
    ce += other.ce;
    kl += other.kl;
    if (other.magnitude > magnitude) magnitude = other.magnitude;
    correct += other.correct;
    valid_rows += other.valid_rows;
  }

  // Divides the weighted sums by the global weight sum W (they stay 0 when W = 0: no row
  // carries weight then).
  DFLASH_HD void finish(const Real& weight_sum) {
    if (weight_sum > Real(0)) {
      loss = loss / weight_sum;
      ce = ce / weight_sum;
      kl = kl / weight_sum;
    } else {
      loss = ce = kl = Real(0);
    }
  }

  Real accuracy() const { return valid_rows == 0 ? Real(0) : Real(correct) / Real(valid_rows); }

 private:
  DFLASH_HD static Real abs_hd(const Real& x) { return x < Real(0) ? Real(-x) : x; }
};

}  // namespace dflash
