// The loss head as production computes it: rows in chunks, per-row streaming statistics over the
// vocabulary (common/row_stats.hpp), and one of four policies deciding what is kept between
// forward and backward (SPEC §7). Every buffer goes through the MemoryTracker, so the policies'
// memory behaviour is measured, not asserted.
//
// What each policy holds (b = sizeof(Real), c = chunk rows, T rows, V vocab, H hidden); "saved" is
// MemoryCategory::loss_saved, "transient" MemoryCategory::transient:
//   materialize            saved: z and log q for all rows in one piece, 2 T V b, + row stats 3 T b
//   chunk_retain           saved: the same, chunk by chunk (2 T V b in all): chunking did not help
//   chunk_recompute        saved: a copy of the input rows T H b + row stats 3 T b; transient 2 c V b
//   chunk_grad_in_forward  saved: dL/dY, T H b; transient 2 c V b + row stats 3 T b
// (materialize and chunk_retain also keep the input rows, T H b, when dL/dW_lm is requested.)
//
// Within a row every policy performs the same operations in the same order, and rows are
// visited in ascending order for every accumulation across rows (dW_lm, the sums), so the four
// policies and all chunk sizes give bitwise identical results.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "common/row_stats.hpp"
#include "reference/hybrid_loss.hpp"
#include "reference/linalg.hpp"
#include "reference/loss_head_types.hpp"
#include "reference/threads.hpp"

namespace dflash {

// What forward keeps for backward. Which members are set depends on the policy.
template <class Real>
struct LossHeadSaved {
  LossPolicy policy = LossPolicy::chunk_recompute;
  std::int64_t chunk_rows = 1;
  Real weight_sum{0};
  std::vector<Tensor<Real>> logits;             // materialize / chunk_retain: z, one [c,V] per chunk
  std::vector<Tensor<Real>> teacher_log_probs;  // materialize / chunk_retain: log q, one [c,V] per chunk
  std::optional<Tensor<Real>> hidden;           // a copy of Y [T,H] (recompute; retain if dW_lm wanted)
  std::optional<Tensor<Real>> row_stats;        // [T,3]: lse(z), lse(z/tau), lse(t/tau)
  std::optional<Tensor<Real>> hidden_grad;      // chunk_grad_in_forward: dL/dY [T,H]
  std::optional<Tensor<Real>> lm_head_grad;     // chunk_grad_in_forward with dW_lm: [V,H]
};

template <class Real>
struct LossHeadForward {
  LossHeadStats<Real> stats;
  Tensor<Real> lse;         // [T]
  Tensor<Real> token_loss;  // [T]
  LossHeadSaved<Real> saved;
  // [T] 1 where w01 = 1 and argmax z = y (lowest index on ties), else 0: the step's own argmax, for
  // the block statistics (TRAINING §17). Not tracked: one byte per row.
  std::vector<std::uint8_t> hits;
};

template <class Real>
struct LossHeadGradients {
  Tensor<Real> hidden_grad;
  std::optional<Tensor<Real>> lm_head_grad;
};

namespace loss_head_detail {

// z[r,:] = W y_r for rows [r0, r0 + rows), and teacher logits t[r,:] = W_t g_r for the valid ones
// (rows without a teacher are set to 0: nothing may depend on them). Both are one product over the
// chunk (a row's logits do not depend on the rows computed with it, linalg.hpp); a row without a
// teacher may hold anything, even NaN, so its logits are overwritten, not read.
template <class Real>
void chunk_logits(const Tensor<Real>& hidden, const LossHeadTargets<Real>& in, std::int64_t r0, std::int64_t rows,
                  Tensor<Real>& z, Tensor<Real>& t) {
  const std::int64_t H = hidden.dim(1), V = in.lm_head->dim(0);
  matmul_abt(hidden.row(r0), in.lm_head->data(), z.data(), rows, V, H);
  matmul_abt(in.teacher_hidden->row(r0), in.teacher_head().data(), t.data(), rows, V, H);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (in.valid[r0 + r] == 0) std::fill(t.row(r), t.row(r) + V, Real(0));
  }
}

// Turns row r of a logits chunk into its gradient in place (z -> dL/dz), given log q in place of t.
template <class Real>
void logits_to_grad_row(Real* z, const Real* log_q, std::int64_t V, std::int64_t label,
                        const HybridRowResult<Real>& row, const HybridHyper<Real>& hp, const Real& scale) {
  for (std::int64_t v = 0; v < V; ++v) {
    z[v] = hybrid_logit_grad(z[v], log_q[v], v == label, row, hp.tau, hp.hard, hp.soft, scale);
  }
}

// For the chunk's rows: dY[i,:] += dz_i W (sequential over v), and dW += dz_i^T y_i when wanted (rows
// ascending). One product per chunk gives the bits of one product per row (linalg.hpp); the rows
// without a teacher have dz = 0, which adds exact zeros (Y is finite, and a sum that starts at +0
// never becomes -0), so they leave dY and dW as a row-by-row loop that skips them would.
template <class Real>
void push_through_head(const Tensor<Real>& dz, const Tensor<Real>& lm_head, const Real* y, Real* dy_rows,
                       Tensor<Real>* dw) {
  const std::int64_t rows = dz.dim(0), V = lm_head.dim(0), H = lm_head.dim(1);
  matmul_ab_accumulate(dz.data(), lm_head.data(), dy_rows, rows, H, V);
  if (dw) matmul_atb_accumulate(dz.data(), y, dw->data(), V, H, rows);
}

// What a chunk row contributes to the batch sums, kept until they are added in row order.
template <class Real>
struct RowContribution {
  HybridRowResult<Real> row;
  bool correct = false;  // argmax z = y
};

// Forward over a chunk's rows with a teacher: the streaming statistics of each row, saved (row
// stats, lse, token loss), and t turned into log q in place. Rows are independent (each one's
// statistics are made by one thread, columns ascending); what they add to the batch sums is
// returned per row, for the caller to add in row order (the sums' order does not depend on the
// thread count). Not tracked: 6 numbers per chunk row, beside the chunk's 2 V per row.
template <class Real>
std::vector<RowContribution<Real>> chunk_row_statistics(const LossHeadTargets<Real>& in, std::int64_t r0,
                                                        const HybridHyper<Real>& hp, const Tensor<Real>& z,
                                                        Tensor<Real>& log_q, Tensor<Real>& row_stats,
                                                        LossHeadForward<Real>& f) {
  const std::int64_t V = z.dim(1);
  std::vector<RowContribution<Real>> contributions(static_cast<std::size_t>(z.dim(0)));
  for_independent_rows<Real>(z.dim(0), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t i = r0 + r;
      if (in.valid[i] == 0) continue;
      const std::int64_t y = in.labels[i];
      HybridRowStats<Real> stats;
      for (std::int64_t v = 0; v < V; ++v) stats.update(z.row(r)[v], log_q.row(r)[v], v, y, hp.tau);
      const HybridRowResult<Real> row = finish_row(stats, hp.tau);
      save_row_stats(row_stats.data(), i, row);
      for (std::int64_t v = 0; v < V; ++v) log_q.row(r)[v] = teacher_log_prob(log_q.row(r)[v], row, hp.tau);
      f.lse[i] = row.lse_z;
      f.token_loss[i] = hybrid_token_loss(row, hp);
      contributions[static_cast<std::size_t>(r)] = {row, stats.argmax == y};
    }
  });
  return contributions;
}

// Turns a chunk's logits z into dz in place, from log q and the saved row statistics; rows without
// a teacher get dz = 0 (push_through_head). Rows are independent: split across
// threads (for_independent_rows).
template <class Real>
void chunk_logits_to_grad(const LossHeadTargets<Real>& in, const Tensor<Real>& row_stats, std::int64_t r0,
                          const HybridHyper<Real>& hp, const Real& weight_sum, Tensor<Real>& z,
                          const Tensor<Real>& log_q) {
  const std::int64_t V = z.dim(1);
  for_independent_rows<Real>(z.dim(0), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t i = r0 + r;
      if (in.valid[i] == 0) {
        std::fill(z.row(r), z.row(r) + V, Real(0));
        continue;
      }
      logits_to_grad_row(z.row(r), log_q.row(r), V, in.labels[i], load_row_stats(row_stats.data(), i), hp,
                         row_grad_scale(in.weights[i], weight_sum));
    }
  });
}

// chunk_recompute's backward: t of a recomputed chunk turned into log q in place, from the saved
// row statistics (rows without a teacher are left as they are: nothing reads them).
template <class Real>
void chunk_teacher_log_probs(const LossHeadTargets<Real>& in, const Tensor<Real>& row_stats, std::int64_t r0,
                             const HybridHyper<Real>& hp, Tensor<Real>& log_q) {
  const std::int64_t V = log_q.dim(1);
  for_independent_rows<Real>(log_q.dim(0), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      if (in.valid[r0 + r] == 0) continue;
      const HybridRowResult<Real> row = load_row_stats(row_stats.data(), r0 + r);
      for (std::int64_t v = 0; v < V; ++v) log_q.row(r)[v] = teacher_log_prob(log_q.row(r)[v], row, hp.tau);
    }
  });
}

}  // namespace loss_head_detail

// Forward over all rows. `hidden` is not needed after this returns: what backward needs is saved.
template <class Real>
LossHeadForward<Real> loss_head_forward(MemoryTracker& tracker, const LossHeadOptions& options,
                                        const Tensor<Real>& hidden, const LossHeadTargets<Real>& in,
                                        const Real& weight_sum) {
  using namespace loss_head_detail;
  validate_loss_head(options, hidden, in, weight_sum);
  const std::int64_t T = hidden.dim(0), H = hidden.dim(1), V = in.lm_head->dim(0);
  const std::int64_t C = effective_chunk_rows(options, T);
  const HybridHyper<Real> hp = hybrid_hyper<Real>(options);
  const LossPolicy policy = options.policy;
  const bool retain = policy == LossPolicy::materialize || policy == LossPolicy::chunk_retain;
  const bool grad_in_forward = policy == LossPolicy::chunk_grad_in_forward;

  LossHeadForward<Real> f{{},
                          Tensor<Real>(tracker, MemoryCategory::outputs, {T}),
                          Tensor<Real>(tracker, MemoryCategory::outputs, {T}),
                          {},
                          std::vector<std::uint8_t>(static_cast<std::size_t>(T), 0)};
  LossHeadSaved<Real>& saved = f.saved;
  saved.policy = policy;
  saved.chunk_rows = C;
  saved.weight_sum = weight_sum;
  if (policy == LossPolicy::chunk_recompute || (retain && options.lm_head_grad)) {
    saved.hidden.emplace(hidden.clone(tracker, MemoryCategory::loss_saved));
  }
  Tensor<Real> row_stats(tracker, grad_in_forward ? MemoryCategory::transient : MemoryCategory::loss_saved,
                         {T, kSavedRowStats});
  if (grad_in_forward) {
    saved.hidden_grad.emplace(tracker, MemoryCategory::loss_saved, Shape{T, H});
    if (options.lm_head_grad) saved.lm_head_grad.emplace(tracker, MemoryCategory::gradients, Shape{V, H});
  }

  for (std::int64_t r0 = 0; r0 < T; r0 += C) {
    const std::int64_t rows = std::min(C, T - r0);
    const MemoryCategory chunk_category = retain ? MemoryCategory::loss_saved : MemoryCategory::transient;
    Tensor<Real> z(tracker, chunk_category, {rows, V});
    Tensor<Real> log_q(tracker, chunk_category, {rows, V});  // holds t, then log q in place
    chunk_logits(hidden, in, r0, rows, z, log_q);

    const std::vector<RowContribution<Real>> contributions = chunk_row_statistics(in, r0, hp, z, log_q, row_stats, f);
    for (std::int64_t r = 0; r < rows; ++r) {  // the batch sums, rows ascending
      const std::int64_t i = r0 + r;
      if (in.valid[i] == 0) continue;
      const RowContribution<Real>& c = contributions[static_cast<std::size_t>(r)];
      f.stats.add_row(in.weights[i], f.token_loss[i], c.row, c.correct);
      f.hits[static_cast<std::size_t>(i)] = c.correct ? 1 : 0;
    }
    if (grad_in_forward) {
      chunk_logits_to_grad(in, row_stats, r0, hp, weight_sum, z, log_q);
      push_through_head(z, *in.lm_head, hidden.row(r0), saved.hidden_grad->row(r0),
                        saved.lm_head_grad ? &*saved.lm_head_grad : nullptr);
    }
    if (retain) {
      saved.logits.push_back(std::move(z));
      saved.teacher_log_probs.push_back(std::move(log_q));
    }
  }
  if (!grad_in_forward) saved.row_stats.emplace(std::move(row_stats));
  f.stats.finish(weight_sum);
  return f;
}

// Backward: dL/dY (and dL/dW_lm). Takes what forward saved (moved in), freeing it chunk by chunk;
// nothing of it outlives this call.
template <class Real>
LossHeadGradients<Real> loss_head_backward(MemoryTracker& tracker, const LossHeadOptions& options,
                                           const LossHeadTargets<Real>& in, LossHeadSaved<Real> saved) {
  using namespace loss_head_detail;
  if (saved.policy != options.policy) {
    throw_input_error("loss_policy", str("backward called with '", loss_policy_name(options.policy),
                                         "' on the saved state of '", loss_policy_name(saved.policy), "'"));
  }
  if (saved.policy == LossPolicy::chunk_grad_in_forward) {
    LossHeadGradients<Real> g{std::move(*saved.hidden_grad), std::move(saved.lm_head_grad)};
    g.hidden_grad.recategorize(MemoryCategory::gradients);
    return g;
  }
  const HybridHyper<Real> hp = hybrid_hyper<Real>(options);
  const std::int64_t V = in.lm_head->dim(0), H = in.lm_head->dim(1);
  const Tensor<Real>& row_stats = *saved.row_stats;
  const std::int64_t T = row_stats.dim(0);
  const std::int64_t C = saved.chunk_rows;
  LossHeadGradients<Real> g{Tensor<Real>(tracker, MemoryCategory::gradients, {T, H}), std::nullopt};
  if (options.lm_head_grad) g.lm_head_grad.emplace(tracker, MemoryCategory::gradients, Shape{V, H});
  Tensor<Real>* dw = g.lm_head_grad ? &*g.lm_head_grad : nullptr;

  for (std::int64_t r0 = 0, chunk = 0; r0 < T; r0 += C, ++chunk) {
    const std::int64_t rows = std::min(C, T - r0);
    Tensor<Real> z, log_q;
    if (saved.policy == LossPolicy::chunk_recompute) {
      z = Tensor<Real>(tracker, MemoryCategory::transient, {rows, V});
      log_q = Tensor<Real>(tracker, MemoryCategory::transient, {rows, V});
      chunk_logits(*saved.hidden, in, r0, rows, z, log_q);
      chunk_teacher_log_probs(in, row_stats, r0, hp, log_q);
    } else {
      z = std::move(saved.logits[chunk]);
      log_q = std::move(saved.teacher_log_probs[chunk]);
    }
    chunk_logits_to_grad(in, row_stats, r0, hp, saved.weight_sum, z, log_q);
    push_through_head(z, *in.lm_head, saved.hidden ? saved.hidden->row(r0) : nullptr, g.hidden_grad.row(r0), dw);
  }
  return g;
}

// Forward then backward, as one call (verification, benchmarks, tests).
template <class Real>
LossHeadResult<Real> run_loss_head(MemoryTracker& tracker, const LossHeadOptions& options, const Tensor<Real>& hidden,
                                   const LossHeadTargets<Real>& in, const Real& weight_sum) {
  LossHeadForward<Real> f = loss_head_forward(tracker, options, hidden, in, weight_sum);
  LossHeadGradients<Real> g = loss_head_backward(tracker, options, in, std::move(f.saved));
  return LossHeadResult<Real>{f.stats, std::move(f.lse), std::move(f.token_loss), std::move(g.hidden_grad),
                              std::move(g.lm_head_grad)};
}

#define DFLASH_LOSS_HEAD_INSTANTIATE(EXTERN, Real)                                                                     \
  EXTERN template LossHeadResult<Real> hybrid_loss_unchunked(                                                          \
      MemoryTracker&, const LossHeadOptions&, const Tensor<Real>&, const LossHeadTargets<Real>&, const Real&);         \
  EXTERN template LossHeadForward<Real> loss_head_forward(MemoryTracker&, const LossHeadOptions&, const Tensor<Real>&, \
                                                          const LossHeadTargets<Real>&, const Real&);                  \
  EXTERN template LossHeadGradients<Real> loss_head_backward(MemoryTracker&, const LossHeadOptions&,                   \
                                                             const LossHeadTargets<Real>&, LossHeadSaved<Real>);       \
  EXTERN template LossHeadResult<Real> run_loss_head(MemoryTracker&, const LossHeadOptions&, const Tensor<Real>&,      \
                                                     const LossHeadTargets<Real>&, const Real&);

// Compiled once, in loss_head.cpp; the 50-digit instantiation is declared in loss_head_mp50.hpp.
DFLASH_LOSS_HEAD_INSTANTIATE(extern, double)

}  // namespace dflash
