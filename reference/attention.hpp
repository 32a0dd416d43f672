// DFlash attention of one layer of one sequence (SPEC §3): block queries attend to the keys
// [context rows; block rows] under the DFlash mask, with grouped-query heads (head h reads kv head
// h / (nh/nkv)) and dropout on the probabilities (site 1, SPEC §6).
//
// Only visible keys are ever touched: a hidden key's probability is exactly 0, and so is its
// dropped-out value, so skipping it is exact. This is also what makes the mask semantics hold
// bitwise (a hidden key's value cannot leak into a visible row, not even as 0 * NaN).
//
// The probabilities are P_j = exp(s_j - lse) with lse the row's logsumexp, in forward and in
// backward alike: forward keeps only lse per (row, head), backward recomputes the same P_j bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "common/attention_mask.hpp"
#include "common/row_math.hpp"
#include "reference/drafter_config.hpp"
#include "reference/drafter_dims.hpp"
#include "reference/dropout.hpp"
#include "reference/linalg.hpp"
#include "reference/tensor.hpp"
#include "reference/threads.hpp"

namespace dflash {

// Keys visible to one query row: context keys [context_begin, context_end) and block rows
// [block_begin, block_end) (key index S + row).
struct VisibleKeys {
  std::int64_t context_begin = 0, context_end = 0;
  std::int64_t block_begin = 0, block_end = 0;
  bool empty() const { return context_end <= context_begin && block_end <= block_begin; }
};

// The mask M_l of one layer for one sequence. Query (n,k) sees context key j iff kappa_n = 1 and
// j < a_n, and block key (n',k') iff kappa_n = 1 and n' = n; in a sliding layer also
// j >= a_n + k - (window - 1) and k' <= k.
struct AttentionMask {
  std::int64_t block_size = 0;
  std::span<const std::int64_t> anchors;
  std::span<const std::uint8_t> keep;
  LayerType type = LayerType::full_attention;
  std::int64_t window = 0;  // read only for sliding layers

  VisibleKeys visible(std::int64_t row) const {
    const std::int64_t n = row / block_size, k = row % block_size;
    VisibleKeys v;
    if (keep[n] == 0) return v;
    const std::int64_t a = anchors[n];
    const bool sliding = type == LayerType::sliding_attention;
    v.context_end = a;
    v.context_begin = sliding ? std::clamp<std::int64_t>(a + k - (window - 1), 0, a) : 0;
    v.block_begin = n * block_size;
    v.block_end = sliding ? n * block_size + k + 1 : (n + 1) * block_size;
    return v;
  }
};

// Visits the visible key indices of a row in the one order every pass uses: context, then block.
template <class Visit>
void for_each_visible_key(const VisibleKeys& v, std::int64_t S, Visit visit) {
  for (std::int64_t j = v.context_begin; j < v.context_end; ++j) visit(j);
  for (std::int64_t r = v.block_begin; r < v.block_end; ++r) visit(S + r);
}

// Visits (head h, its kv head g = h / (nh/nkv), query row i, its visible keys) for every row
// that sees at least one key, for heads [head_begin, head_end), heads outermost: the one order
// forward and backward both use.
template <class Visit>
void for_each_attending_row(const DrafterDims& dims, const AttentionMask& mask, std::int64_t head_begin,
                            std::int64_t head_end, Visit visit) {
  const std::int64_t group = dims.nh / dims.nkv;
  for (std::int64_t h = head_begin; h < head_end; ++h) {
    for (std::int64_t i = 0; i < dims.T; ++i) {
      const VisibleKeys v = mask.visible(i);
      if (!v.empty()) visit(h, h / group, i, v);
    }
  }
}

template <class Real>
struct AttentionInputs {
  const Real* q;      // [T, nh d] (normed, rotated)
  const Real* k_ctx;  // [S, nkv d]
  const Real* v_ctx;  // [S, nkv d]
  const Real* k_blk;  // [T, nkv d]
  const Real* v_blk;  // [T, nkv d]

  // Row `key` of [context; block] for kv head g.
  const Real* key(const DrafterDims& dims, std::int64_t key, std::int64_t g) const {
    return key < dims.S ? k_ctx + key * dims.kv_width() + g * dims.d
                        : k_blk + (key - dims.S) * dims.kv_width() + g * dims.d;
  }
  const Real* value(const DrafterDims& dims, std::int64_t key, std::int64_t g) const {
    return key < dims.S ? v_ctx + key * dims.kv_width() + g * dims.d
                        : v_blk + (key - dims.S) * dims.kv_width() + g * dims.d;
  }
};

template <class Real>
struct AttentionGrads {
  Real* dq;      // [T, nh d]
  Real* dk_ctx;  // [S, nkv d], accumulated
  Real* dv_ctx;  // [S, nkv d], accumulated
  Real* dk_blk;  // [T, nkv d], accumulated
  Real* dv_blk;  // [T, nkv d], accumulated

  Real* key(const DrafterDims& dims, std::int64_t key, std::int64_t g) const {
    return key < dims.S ? dk_ctx + key * dims.kv_width() + g * dims.d
                        : dk_blk + (key - dims.S) * dims.kv_width() + g * dims.d;
  }
  Real* value(const DrafterDims& dims, std::int64_t key, std::int64_t g) const {
    return key < dims.S ? dv_ctx + key * dims.kv_width() + g * dims.d
                        : dv_blk + (key - dims.S) * dims.kv_width() + g * dims.d;
  }
};

// Site 1 element index: (h T + i)(S + T) + j, j over [context keys; block keys].
inline std::uint64_t attention_dropout_element(const DrafterDims& dims, std::int64_t h, std::int64_t i,
                                               std::int64_t key) {
  return attention_dropout_element(h, i, key, dims.S, dims.T);
}

namespace attention_detail {
// out[j] = x . row(j) for every visible key j: one dot_rows per contiguous range (context, block),
// each dot in the plain order (linalg.hpp), so the bits are those of one dot per key.
template <class Real, class Row>
void dot_visible(const DrafterDims& dims, const VisibleKeys& v, const Real* x, Row row, Real* out) {
  const std::int64_t stride = dims.kv_width();
  if (v.context_end > v.context_begin) {
    dot_rows(x, row(v.context_begin), stride, v.context_end - v.context_begin, dims.d, out + v.context_begin);
  }
  if (v.block_end > v.block_begin) {
    dot_rows(x, row(dims.S + v.block_begin), stride, v.block_end - v.block_begin, dims.d, out + dims.S + v.block_begin);
  }
}
// The key and value gradients one part of the backward pass adds to: kv heads [g0, g1). Split over
// threads (`own`), the part works in its thread's copy, [keys][g1 - g0][d], gathered first and
// scattered back after: in the shared [keys, nkv d] rows the kv heads lie side by side, 256 bytes
// each, and two cores adding into neighbouring heads of the same rows slowed each other by 30-40%
// (bench/results/reference_vs_torch.md, 2026-12-01). Copies are exact, and each sum still runs in
// the one-thread order: the bits do not change. On one thread it adds into `grads` in place. The
// copy is this pass's workspace (like the product's packing buffers), not a counted tensor.
template <class Real>
class PartKeyGrads {
 public:
  PartKeyGrads(const DrafterDims& dims, const AttentionGrads<Real>& grads, std::int64_t g0, std::int64_t g1, bool own)
      : dims_(dims), grads_(grads), g0_(g0), g1_(g1), width_((g1 - g0) * dims.d), own_(own) {
    if (!own_) return;
    thread_local std::vector<Real> workspace;
    workspace.resize(static_cast<std::size_t>(2 * dims.keys() * width_));
    keys_ = workspace.data();
    values_ = keys_ + dims.keys() * width_;
    copy(true);
  }
  Real* key(std::int64_t j, std::int64_t g) const {
    return own_ ? keys_ + j * width_ + (g - g0_) * dims_.d : grads_.key(dims_, j, g);
  }
  Real* value(std::int64_t j, std::int64_t g) const {
    return own_ ? values_ + j * width_ + (g - g0_) * dims_.d : grads_.value(dims_, j, g);
  }
  void scatter() const {
    if (own_) copy(false);
  }

 private:
  void copy(bool gather) const {
    for (std::int64_t j = 0; j < dims_.keys(); ++j) {
      for (std::int64_t g = g0_; g < g1_; ++g) {
        Real *shared_key = grads_.key(dims_, j, g), *shared_value = grads_.value(dims_, j, g);
        Real *own_key = key(j, g), *own_value = value(j, g);
        if (gather) {
          std::copy(shared_key, shared_key + dims_.d, own_key);
          std::copy(shared_value, shared_value + dims_.d, own_value);
        } else {
          std::copy(own_key, own_key + dims_.d, shared_key);
          std::copy(own_value, own_value + dims_.d, shared_value);
        }
      }
    }
  }
  const DrafterDims& dims_;
  const AttentionGrads<Real>& grads_;
  std::int64_t g0_, g1_, width_;
  bool own_;
  Real *keys_ = nullptr, *values_ = nullptr;
};

template <class Real>
Real sqrt_head_dim(std::int64_t d) {
  using std::sqrt;
  return Real(sqrt(Real(d)));
}
// How many parts the heads of a pass are split into (reference/threads.hpp): one per thread in
// double; one for the 50-digit judge (the plain path), and one when an observer records the
// dropout draws (it sees them in the one-thread order, from one thread).
template <class Real>
std::int64_t head_parts(std::int64_t heads, const DropoutSiteMask<Real>& dropout) {
  if constexpr (std::is_same_v<Real, double>) {
    return dropout.observed() ? 1 : row_parts(heads);
  } else {
    return 1;
  }
}
}  // namespace attention_detail

// out[i, h] = sum_j dropout(P_ij) V_j; lse[i, h] = logsumexp of the visible scores (0 and an
// all-zero output for a row that sees no key). `out` must be zero on entry.
// Each (row, head) writes only its own output and lse, so the heads are split across threads, each
// part with its own score row (one row on one thread, the closed form of planner/trunk_plan.cpp).
template <class Real>
void dflash_attention_forward(MemoryTracker& tracker, const DrafterDims& dims, const AttentionMask& mask,
                              const AttentionInputs<Real>& in, const DropoutSiteMask<Real>& dropout, Real* lse,
                              Real* out) {
  using namespace attention_detail;
  const Real sqrt_d = sqrt_head_dim<Real>(dims.d);
  const std::int64_t d = dims.d;
  const std::int64_t parts = head_parts(dims.nh, dropout);
  Tensor<Real> score_rows(tracker, MemoryCategory::transient, {parts, dims.keys()});
  run_row_parts(dims.nh, parts, [&](std::int64_t part, std::int64_t head_begin, std::int64_t head_end) {
    Real* scores = score_rows.row(part);
    for_each_attending_row(
        dims, mask, head_begin, head_end, [&](std::int64_t h, std::int64_t g, std::int64_t i, const VisibleKeys& v) {
          const Real* q = in.q + i * dims.q_width() + h * d;
          dot_visible(
              dims, v, q, [&](std::int64_t j) { return in.key(dims, j, g); }, scores);
          Real max_score(0);
          bool first = true;
          for_each_visible_key(v, dims.S, [&](std::int64_t j) {
            scores[j] = scores[j] / sqrt_d;
            if (first || scores[j] > max_score) max_score = scores[j];
            first = false;
          });
          Real sum(0);
          for_each_visible_key(v, dims.S, [&](std::int64_t j) { sum += exp_of(Real(scores[j] - max_score)); });
          const Real row_lse = max_score + log_of(sum);
          lse[i * dims.nh + h] = row_lse;
          Real* o = out + i * dims.q_width() + h * d;
          for_each_visible_key(v, dims.S, [&](std::int64_t j) {
            const Real p = exp_of(Real(scores[j] - row_lse)) * dropout.factor(attention_dropout_element(dims, h, i, j));
            add_scaled(d, p, in.value(dims, j, g), o);
          });
        });
  });
}

// With P the probabilities, f the dropout factors and dP_j = f_j dO . V_j:
//   dV_j += P_j f_j dO,   dS_j = P_j (dP_j - sum_l P_l dP_l),   dQ += dS_j K_j / sqrt d,   dK_j += dS_j Q / sqrt d.
// `grads.dq` must be zero on entry; the key/value gradients accumulate.
// The key and value gradients of kv head g are sums over the rows of the heads that read it, so
// the kv heads are split across threads: each sum is then made by one thread in the one-thread
// order (heads ascending, then rows), and dq rows belong to their head. Three key rows per part.
template <class Real>
void dflash_attention_backward(MemoryTracker& tracker, const DrafterDims& dims, const AttentionMask& mask,
                               const AttentionInputs<Real>& in, const DropoutSiteMask<Real>& dropout, const Real* lse,
                               const Real* d_out, const AttentionGrads<Real>& grads) {
  using namespace attention_detail;
  const Real sqrt_d = sqrt_head_dim<Real>(dims.d);
  const std::int64_t d = dims.d, group = dims.nh / dims.nkv;
  const std::int64_t parts = head_parts(dims.nkv, dropout);
  Tensor<Real> prob_rows(tracker, MemoryCategory::transient, {parts, dims.keys()});
  Tensor<Real> factor_rows(tracker, MemoryCategory::transient, {parts, dims.keys()});
  Tensor<Real> d_prob_rows(tracker, MemoryCategory::transient, {parts, dims.keys()});
  run_row_parts(dims.nkv, parts, [&](std::int64_t part, std::int64_t kv_begin, std::int64_t kv_end) {
    Real* probs = prob_rows.row(part);
    Real* factors = factor_rows.row(part);
    Real* d_probs = d_prob_rows.row(part);
    PartKeyGrads<Real> part_grads(dims, grads, kv_begin, kv_end, parts > 1);
    for_each_attending_row(
        dims, mask, kv_begin * group, kv_end * group,
        [&](std::int64_t h, std::int64_t g, std::int64_t i, const VisibleKeys& v) {
          const Real* q = in.q + i * dims.q_width() + h * d;
          const Real* d_o = d_out + i * dims.q_width() + h * d;
          const Real row_lse = lse[i * dims.nh + h];
          dot_visible(
              dims, v, q, [&](std::int64_t j) { return in.key(dims, j, g); }, probs);  // q . K_j
          dot_visible(
              dims, v, d_o, [&](std::int64_t j) { return in.value(dims, j, g); }, d_probs);  // dO . V_j
          Real p_dot_dp(0);
          for_each_visible_key(v, dims.S, [&](std::int64_t j) {
            probs[j] = exp_of(Real(probs[j] / sqrt_d - row_lse));
            factors[j] = dropout.factor(attention_dropout_element(dims, h, i, j));
            d_probs[j] = d_probs[j] * factors[j];
            p_dot_dp += probs[j] * d_probs[j];
          });
          Real* dq = grads.dq + i * dims.q_width() + h * d;
          for_each_visible_key(v, dims.S, [&](std::int64_t j) {
            const Real d_score = probs[j] * (d_probs[j] - p_dot_dp) / sqrt_d;
            const Real p = probs[j] * factors[j];
            add_scaled(d, d_score, in.key(dims, j, g), dq);  // distinct tensors: three loops are one loop's bits
            add_scaled(d, d_score, q, part_grads.key(j, g));
            add_scaled(d, p, d_o, part_grads.value(j, g));
          });
        });
    part_grads.scatter();
  });
}

}  // namespace dflash
