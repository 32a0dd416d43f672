// One drafter layer of one sequence (SPEC §3), forward and backward side by side:
//   u  = RMSNorm(X; w_in)
//   Q  = RoPE(RMSNorm_d(u Wq^T)), Kc = RoPE(RMSNorm_d(C Wk^T)), Kb = RoPE(RMSNorm_d(u Wk^T)), Vc = C Wv^T, Vb = u Wv^T
//   O  = DFlash attention (reference/attention.hpp)
//   X' = X + dropout_2(O Wo^T);  v = RMSNorm(X'; w_post);  X'' = X' + dropout_3(Wdown (silu(v Wg^T) * (v Wu^T)))
// The forward writes what the backward reads into LayerActivations (kept or thrown away by the
// trunk policy); the backward reads only those, the layer input, the context C and the weights,
// and regenerates every dropout mask.
#pragma once

#include <cstdint>
#include <span>

#include "reference/attention.hpp"
#include "reference/drafter_dims.hpp"
#include "reference/drafter_parameters.hpp"
#include "reference/dropout.hpp"
#include "reference/linalg.hpp"
#include "reference/mlp.hpp"
#include "reference/rms_norm.hpp"
#include "reference/rope.hpp"

namespace dflash {

// One layer's intermediates, from its forward to its backward (the layer input X is kept by the
// trunk, see reference/trunk_memory.hpp, which lists these tensors for the memory planner).
template <class Real>
struct LayerActivations {
  Tensor<Real> input_rstd;  // [T]          rstd of RMSNorm(X; w_in)
  Tensor<Real> u;           // [T, H]       RMSNorm(X; w_in): input of q/k/v_proj
  Tensor<Real> q_proj;      // [T, nh d]    u Wq^T: input of q_norm
  Tensor<Real> q_rstd;      // [T, nh]
  Tensor<Real> q;           // [T, nh d]    normed, rotated queries
  Tensor<Real> k_ctx_proj;  // [S, nkv d]   C Wk^T: input of k_norm
  Tensor<Real> k_ctx_rstd;  // [S, nkv]
  Tensor<Real> k_ctx;       // [S, nkv d]   normed, rotated context keys
  Tensor<Real> v_ctx;       // [S, nkv d]   C Wv^T
  Tensor<Real> k_blk_proj;  // [T, nkv d]   u Wk^T: input of k_norm
  Tensor<Real> k_blk_rstd;  // [T, nkv]
  Tensor<Real> k_blk;       // [T, nkv d]   normed, rotated block keys
  Tensor<Real> v_blk;       // [T, nkv d]   u Wv^T
  Tensor<Real> attn_lse;    // [T, nh]      logsumexp of each row's visible scores
  Tensor<Real> attn_out;    // [T, nh d]    O: input of o_proj
  Tensor<Real> x_mid;       // [T, H]       X' (after the attention residual): input of post_attention_layernorm
  Tensor<Real> post_rstd;   // [T]
  Tensor<Real> v;           // [T, H]       RMSNorm(X'; w_post): input of gate/up_proj
  Tensor<Real> gate;        // [T, I]       v Wg^T
  Tensor<Real> up;          // [T, I]       v Wu^T
  Tensor<Real> act;         // [T, I]       silu(gate) * up: input of down_proj

  LayerActivations(MemoryTracker& t, const DrafterDims& m, MemoryCategory c)
      : input_rstd(t, c, {m.T}),
        u(t, c, {m.T, m.H}),
        q_proj(t, c, {m.T, m.q_width()}),
        q_rstd(t, c, {m.T, m.nh}),
        q(t, c, {m.T, m.q_width()}),
        k_ctx_proj(t, c, {m.S, m.kv_width()}),
        k_ctx_rstd(t, c, {m.S, m.nkv}),
        k_ctx(t, c, {m.S, m.kv_width()}),
        v_ctx(t, c, {m.S, m.kv_width()}),
        k_blk_proj(t, c, {m.T, m.kv_width()}),
        k_blk_rstd(t, c, {m.T, m.nkv}),
        k_blk(t, c, {m.T, m.kv_width()}),
        v_blk(t, c, {m.T, m.kv_width()}),
        attn_lse(t, c, {m.T, m.nh}),
        attn_out(t, c, {m.T, m.q_width()}),
        x_mid(t, c, {m.T, m.H}),
        post_rstd(t, c, {m.T}),
        v(t, c, {m.T, m.H}),
        gate(t, c, {m.T, m.I}),
        up(t, c, {m.T, m.I}),
        act(t, c, {m.T, m.I}) {}
};

// What every layer of one sequence reads besides its own weights and input.
template <class Real>
struct LayerContext {
  const DrafterConfig* config = nullptr;
  DrafterDims dims;
  const Tensor<Real>* context = nullptr;            // C [S, H]
  std::span<const std::int64_t> anchors;            // [N]
  std::span<const std::uint8_t> keep;               // [N]
  std::span<const std::int64_t> block_positions;    // [T] a_n + k
  std::span<const std::int64_t> context_positions;  // [S] j
  DropoutCoordinates dropout;                       // the pass is set by the trunk

  AttentionMask mask(std::int64_t layer) const {
    const LayerType type = config->layer_types.at(static_cast<std::size_t>(layer));
    return AttentionMask{dims.B, anchors, keep, type, config->sliding_window.value_or(0)};
  }
  DropoutSiteMask<Real> dropout_mask(std::int64_t layer, DropoutSite site) const {
    const double p = site == DropoutSite::attention_probs ? config->attention_dropout : config->hidden_dropout;
    return DropoutSiteMask<Real>(dropout, static_cast<std::uint32_t>(layer), site, p);
  }
  Real eps() const { return Real(config->rms_norm_eps); }
};

namespace drafter_layer_detail {

// Row-wise passes below split their rows across threads (for_independent_rows): each output row
// is made by one thread; the weight gradients, sums over rows, are added rows ascending on one.

// y[i] = RMSNorm(x[i]; w) for every row, rstd[i] kept.
template <class Real>
void rms_norm_rows_forward(const Tensor<Real>& x, const Tensor<Real>& w, const Real& eps, Tensor<Real>& rstd,
                           Tensor<Real>& y) {
  const std::int64_t n = x.dim(1);
  for_independent_rows<Real>(x.dim(0), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) rstd[i] = rms_norm_forward(x.row(i), w.data(), n, eps, y.row(i));
  });
}

// dx[i] += ..., dw += ... for every row: dw is a sum over rows, added rows ascending first (it
// reads only dy), then the rows' input gradients, split.
template <class Real>
void rms_norm_rows_backward(const Tensor<Real>& x, const Tensor<Real>& w, const Tensor<Real>& rstd,
                            const Tensor<Real>& dy, Tensor<Real>& dx, Tensor<Real>& dw) {
  const std::int64_t n = x.dim(1);
  for (std::int64_t i = 0; i < x.dim(0); ++i) rms_norm_weight_grad(x.row(i), rstd[i], dy.row(i), n, dw.data());
  for_independent_rows<Real>(x.dim(0), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      rms_norm_input_grad(x.row(i), w.data(), rstd[i], dy.row(i), n, dx.row(i));
  });
}

// out = RoPE(RMSNorm_d(proj)) per head, each row with its own position.
template <class Real>
void head_norm_rope_forward(const Tensor<Real>& proj, const Tensor<Real>& weight, const Real& eps,
                            const RopeTable<Real>& rope, std::int64_t heads, std::int64_t d, Tensor<Real>& rstd,
                            Tensor<Real>& out) {
  for_independent_rows<Real>(proj.dim(0), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      for (std::int64_t h = 0; h < heads; ++h) {
        rstd[r * heads + h] = rms_norm_forward(proj.row(r) + h * d, weight.data(), d, eps, out.row(r) + h * d);
        rope_forward(out.row(r) + h * d, rope.cos_row(r), rope.sin_row(r), d);
      }
    }
  });
}

// d_out (consumed: rotated back in place) -> d_proj += ..., d_weight += ... (rows, then heads,
// ascending: the order of one rms_norm_backward per (row, head)).
template <class Real>
void head_norm_rope_backward(Tensor<Real>& d_out, const Tensor<Real>& proj, const Tensor<Real>& rstd,
                             const Tensor<Real>& weight, const RopeTable<Real>& rope, std::int64_t heads,
                             std::int64_t d, Tensor<Real>& d_proj, Tensor<Real>& d_weight) {
  for_independent_rows<Real>(proj.dim(0), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      for (std::int64_t h = 0; h < heads; ++h) {
        Real* g = d_out.row(r) + h * d;
        rope_backward(g, rope.cos_row(r), rope.sin_row(r), d);
        rms_norm_input_grad(proj.row(r) + h * d, weight.data(), rstd[r * heads + h], g, d, d_proj.row(r) + h * d);
      }
    }
  });
  for (std::int64_t r = 0; r < proj.dim(0); ++r) {
    for (std::int64_t h = 0; h < heads; ++h) {
      rms_norm_weight_grad(proj.row(r) + h * d, rstd[r * heads + h], d_out.row(r) + h * d, d, d_weight.data());
    }
  }
}

// out = x + dropout(branch), elementwise; element index i H + c (sites 2 and 3).
template <class Real>
void add_dropped_residual(const Tensor<Real>& x, const Tensor<Real>& branch, const DropoutSiteMask<Real>& mask,
                          Tensor<Real>& out) {
  const std::int64_t n = x.row_size();
  for_independent_rows<Real>(
      x.dim(0),
      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t e = begin * n; e < end * n; ++e) {
          out[e] = x[e] + branch[e] * mask.factor(static_cast<std::uint64_t>(e));
        }
      },
      !mask.observed());
}

// d_branch = dropout'(d_out): the same factors, regenerated.
template <class Real>
void dropped_residual_backward(const Tensor<Real>& d_out, const DropoutSiteMask<Real>& mask, Tensor<Real>& d_branch) {
  const std::int64_t n = d_out.row_size();
  for_independent_rows<Real>(
      d_out.dim(0),
      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t e = begin * n; e < end * n; ++e)
          d_branch[e] = d_out[e] * mask.factor(static_cast<std::uint64_t>(e));
      },
      !mask.observed());
}

// y[M, out] = x[M, in] W[out, in]^T
template <class Real>
void linear_forward(const Tensor<Real>& x, const Tensor<Real>& w, Tensor<Real>& y) {
  matmul_abt(x.data(), w.data(), y.data(), x.dim(0), w.dim(0), w.dim(1));
}

// dx[M, in] += dy[M, out] W;  dW[out, in] += dy^T x.
template <class Real>
void linear_backward(const Tensor<Real>& x, const Tensor<Real>& w, const Tensor<Real>& dy, Tensor<Real>* dx,
                     Tensor<Real>& dw) {
  if (dx != nullptr) matmul_ab_accumulate(dy.data(), w.data(), dx->data(), dy.dim(0), w.dim(1), w.dim(0));
  matmul_atb_accumulate(dy.data(), x.data(), dw.data(), w.dim(0), w.dim(1), dy.dim(0));
}

}  // namespace drafter_layer_detail

// Returns the layer output X'' (MemoryCategory::transient; the trunk recategorises what it keeps).
template <class Real>
Tensor<Real> drafter_layer_forward(MemoryTracker& tracker, const LayerContext<Real>& ctx, std::int64_t layer,
                                   const DrafterLayerParameters<Real>& w, const Tensor<Real>& x,
                                   LayerActivations<Real>& a) {
  using namespace drafter_layer_detail;
  const DrafterDims& m = ctx.dims;
  const Real eps = ctx.eps();
  const Tensor<Real>& C = *ctx.context;
  const RopeTable<Real> rope_blk(tracker, ctx.block_positions, m.d, ctx.config->rope_theta);
  const RopeTable<Real> rope_ctx(tracker, ctx.context_positions, m.d, ctx.config->rope_theta);

  rms_norm_rows_forward(x, w.input_layernorm, eps, a.input_rstd, a.u);
  linear_forward(a.u, w.q_proj, a.q_proj);
  head_norm_rope_forward(a.q_proj, w.q_norm, eps, rope_blk, m.nh, m.d, a.q_rstd, a.q);
  linear_forward(C, w.k_proj, a.k_ctx_proj);
  head_norm_rope_forward(a.k_ctx_proj, w.k_norm, eps, rope_ctx, m.nkv, m.d, a.k_ctx_rstd, a.k_ctx);
  linear_forward(C, w.v_proj, a.v_ctx);
  linear_forward(a.u, w.k_proj, a.k_blk_proj);
  head_norm_rope_forward(a.k_blk_proj, w.k_norm, eps, rope_blk, m.nkv, m.d, a.k_blk_rstd, a.k_blk);
  linear_forward(a.u, w.v_proj, a.v_blk);

  const AttentionInputs<Real> in{a.q.data(), a.k_ctx.data(), a.v_ctx.data(), a.k_blk.data(), a.v_blk.data()};
  dflash_attention_forward(tracker, m, ctx.mask(layer), in, ctx.dropout_mask(layer, DropoutSite::attention_probs),
                           a.attn_lse.data(), a.attn_out.data());
  {
    Tensor<Real> attn_proj(tracker, MemoryCategory::transient, {m.T, m.H});
    linear_forward(a.attn_out, w.o_proj, attn_proj);
    add_dropped_residual(x, attn_proj, ctx.dropout_mask(layer, DropoutSite::attention_residual), a.x_mid);
  }

  rms_norm_rows_forward(a.x_mid, w.post_attention_layernorm, eps, a.post_rstd, a.v);
  linear_forward(a.v, w.gate_proj, a.gate);
  linear_forward(a.v, w.up_proj, a.up);
  for_independent_rows<Real>(m.T, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) swiglu_forward(a.gate.row(i), a.up.row(i), a.act.row(i), m.I);
  });
  Tensor<Real> mlp_out(tracker, MemoryCategory::transient, {m.T, m.H});
  linear_forward(a.act, w.down_proj, mlp_out);
  Tensor<Real> out(tracker, MemoryCategory::transient, {m.T, m.H});
  add_dropped_residual(a.x_mid, mlp_out, ctx.dropout_mask(layer, DropoutSite::mlp_residual), out);
  return out;
}

// Takes dL/dX'' (consumed) and returns dL/dX (MemoryCategory::transient); accumulates the layer's
// parameter gradients into `g` and the context gradient into `d_context` [S, H].
template <class Real>
Tensor<Real> drafter_layer_backward(MemoryTracker& tracker, const LayerContext<Real>& ctx, std::int64_t layer,
                                    const DrafterLayerParameters<Real>& w, const Tensor<Real>& x,
                                    const LayerActivations<Real>& a, Tensor<Real> d_out,
                                    DrafterLayerParameters<Real>& g, Tensor<Real>& d_context) {
  using namespace drafter_layer_detail;
  const DrafterDims& m = ctx.dims;
  const Tensor<Real>& C = *ctx.context;
  auto scratch = [&](std::int64_t rows, std::int64_t cols) {
    return Tensor<Real>(tracker, MemoryCategory::transient, {rows, cols});
  };

  // MLP branch: X'' = X' + dropout_3(act Wdown^T).
  Tensor<Real> d_v = scratch(m.T, m.H);
  {
    Tensor<Real> d_mlp = scratch(m.T, m.H);
    dropped_residual_backward(d_out, ctx.dropout_mask(layer, DropoutSite::mlp_residual), d_mlp);
    Tensor<Real> d_act = scratch(m.T, m.I);
    linear_backward(a.act, w.down_proj, d_mlp, &d_act, g.down_proj);
    Tensor<Real> d_gate = scratch(m.T, m.I), d_up = scratch(m.T, m.I);
    for_independent_rows<Real>(m.T, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        swiglu_backward(a.gate.row(i), a.up.row(i), d_act.row(i), d_gate.row(i), d_up.row(i), m.I);
      }
    });
    linear_backward(a.v, w.gate_proj, d_gate, &d_v, g.gate_proj);
    linear_backward(a.v, w.up_proj, d_up, &d_v, g.up_proj);
  }
  Tensor<Real> d_x = std::move(d_out);  // the residual path: dL/dX' starts as dL/dX''
  rms_norm_rows_backward(a.x_mid, w.post_attention_layernorm, a.post_rstd, d_v, d_x, g.post_attention_layernorm);
  d_v.release();

  // Attention branch: X' = X + dropout_2(O Wo^T).
  Tensor<Real> d_q = scratch(m.T, m.q_width());
  Tensor<Real> d_k_ctx = scratch(m.S, m.kv_width()), d_v_ctx = scratch(m.S, m.kv_width());
  Tensor<Real> d_k_blk = scratch(m.T, m.kv_width()), d_v_blk = scratch(m.T, m.kv_width());
  {
    Tensor<Real> d_attn_proj = scratch(m.T, m.H);
    dropped_residual_backward(d_x, ctx.dropout_mask(layer, DropoutSite::attention_residual), d_attn_proj);
    Tensor<Real> d_attn_out = scratch(m.T, m.q_width());
    linear_backward(a.attn_out, w.o_proj, d_attn_proj, &d_attn_out, g.o_proj);
    const AttentionInputs<Real> in{a.q.data(), a.k_ctx.data(), a.v_ctx.data(), a.k_blk.data(), a.v_blk.data()};
    const AttentionGrads<Real> d_in{d_q.data(), d_k_ctx.data(), d_v_ctx.data(), d_k_blk.data(), d_v_blk.data()};
    dflash_attention_backward(tracker, m, ctx.mask(layer), in, ctx.dropout_mask(layer, DropoutSite::attention_probs),
                              a.attn_lse.data(), d_attn_out.data(), d_in);
  }

  // q/k norms and RoPE, then the projections (context rows first, then block rows).
  const RopeTable<Real> rope_blk(tracker, ctx.block_positions, m.d, ctx.config->rope_theta);
  const RopeTable<Real> rope_ctx(tracker, ctx.context_positions, m.d, ctx.config->rope_theta);
  Tensor<Real> d_q_proj = scratch(m.T, m.q_width());
  Tensor<Real> d_k_ctx_proj = scratch(m.S, m.kv_width()), d_k_blk_proj = scratch(m.T, m.kv_width());
  head_norm_rope_backward(d_q, a.q_proj, a.q_rstd, w.q_norm, rope_blk, m.nh, m.d, d_q_proj, g.q_norm);
  head_norm_rope_backward(d_k_ctx, a.k_ctx_proj, a.k_ctx_rstd, w.k_norm, rope_ctx, m.nkv, m.d, d_k_ctx_proj, g.k_norm);
  head_norm_rope_backward(d_k_blk, a.k_blk_proj, a.k_blk_rstd, w.k_norm, rope_blk, m.nkv, m.d, d_k_blk_proj, g.k_norm);

  Tensor<Real> d_u = scratch(m.T, m.H);
  linear_backward(a.u, w.q_proj, d_q_proj, &d_u, g.q_proj);
  linear_backward(C, w.k_proj, d_k_ctx_proj, &d_context, g.k_proj);
  linear_backward(a.u, w.k_proj, d_k_blk_proj, &d_u, g.k_proj);
  linear_backward(C, w.v_proj, d_v_ctx, &d_context, g.v_proj);
  linear_backward(a.u, w.v_proj, d_v_blk, &d_u, g.v_proj);

  rms_norm_rows_backward(x, w.input_layernorm, a.input_rstd, d_u, d_x, g.input_layernorm);
  return d_x;
}

}  // namespace dflash
