// One drafter layer of one sequence (SPEC §3), forward and backward, written once over a
// backend: on the GPU (cuda/trunk/device_backend.hpp: cuBLAS, the CUDA kernels) and on the CPU
// (harness/cuda/host_backend.hpp: the same kernel bodies and programs run by host loops, plain
// GEMM loops), so that the layer's orchestration -- every projection's transposition, buffer,
// dropout site and order -- is tested in CI against the double reference. The twin of
// reference/drafter_layer.hpp, in its order.
//
// Formats: the residual stream X, X' and every gradient are fp32; what feeds a GEMM or the
// attention kernels is Backend::Storage (bf16 bits on the GPU: u, v, act, q, k, v rows, O, the
// context C); projection outputs that a norm reads back in backward (q/k projections) are fp32;
// row statistics are fp32. A gradient that feeds a GEMM is narrowed to Storage first; weight
// gradients accumulate in fp32.
//
// A backend provides: Storage; Buffer<T> (data, size, zero, release, recategorize) made by
// buffer<T>(category, n); and the operations below, with the launchers' signatures
// (cuda/trunk/elementwise_kernels.hpp, cuda/attention/kernels.hpp, cuda/gemm/linear.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/dropout_site_view.hpp"
#include "cuda/attention/simt_program.hpp"
#include "planner/cuda_trunk_memory.hpp"
#include "reference/drafter_dims.hpp"
#include "reference/memory_tracker.hpp"

namespace dflash {

// One layer's weights: Storage matrices [out, in], fp32 norm weights.
template <class Storage>
struct LayerWeights {
  const Storage *q_proj, *k_proj, *v_proj, *o_proj, *gate_proj, *up_proj, *down_proj;
  const float *input_layernorm, *q_norm, *k_norm, *post_attention_layernorm;
};

// One layer's parameter gradients, fp32, accumulated (+=).
struct LayerGrads {
  float *q_proj, *k_proj, *v_proj, *o_proj, *gate_proj, *up_proj, *down_proj;
  float *input_layernorm, *q_norm, *k_norm, *post_attention_layernorm;
};

// What every layer of one sequence reads besides its weights and input (backend pointers).
template <class Storage>
struct TrunkLayerContext {
  DrafterDims dims;
  float eps = 1e-6f;
  double rope_theta = 10000.0;
  std::int64_t sliding_window = 0;
  std::int64_t key_tile = 32;                       // context keys per attention tile
  const Storage* context = nullptr;                 // C [S, H]
  const std::int64_t* anchors = nullptr;            // [N]
  const std::uint8_t* keep = nullptr;               // [N]
  const std::int64_t* block_positions = nullptr;    // [T] a_n + k
  const std::int64_t* context_positions = nullptr;  // [S] j
  std::uint64_t seed = 0;
  std::uint32_t step = 0, sequence = 0;  // GLOBAL sequence index (SPEC §6)
  double attention_dropout = 0, hidden_dropout = 0;
};

namespace trunk_layer_detail {

inline std::size_t count(std::int64_t a, std::int64_t b = 1) { return static_cast<std::size_t>(a * b); }

template <class Storage>
AttentionProblem attention_problem(const TrunkLayerContext<Storage>& ctx, std::int64_t layer, bool sliding) {
  const DrafterDims& m = ctx.dims;
  AttentionProblem pb;
  pb.tiling = AttentionTiling{m.S, m.N, m.B, m.nh, m.nkv, m.d, ctx.key_tile};
  pb.mask = AttentionMaskView{ctx.anchors, ctx.keep, m.S, m.B, sliding, ctx.sliding_window};
  pb.dropout = dropout_site_view(ctx.seed, ctx.step, ctx.sequence, static_cast<std::uint32_t>(layer),
                                 DropoutSite::attention_probs, ctx.attention_dropout);
  return pb;
}

template <class Storage>
DropoutSiteView hidden_dropout(const TrunkLayerContext<Storage>& ctx, std::int64_t layer, DropoutSite site) {
  return dropout_site_view(ctx.seed, ctx.step, ctx.sequence, static_cast<std::uint32_t>(layer), site,
                           ctx.hidden_dropout);
}

// x narrowed to Storage: the GEMM operand of an fp32 gradient (transient).
template <class Backend>
typename Backend::template Buffer<typename Backend::Storage> narrowed(
    const Backend& be, const typename Backend::template Buffer<float>& x) {
  auto y = be.template buffer<typename Backend::Storage>(MemoryCategory::transient, x.size());
  be.narrow(x.data(), static_cast<std::int64_t>(x.size()), y.data());
  return y;
}

}  // namespace trunk_layer_detail

// One layer's intermediates from forward to backward (reference/drafter_layer.hpp's list, in
// the formats above), all under one category.
template <class Backend>
struct TrunkLayerActivations {
  using Storage = typename Backend::Storage;
  template <class T>
  using Buffer = typename Backend::template Buffer<T>;
  Buffer<float> input_rstd;  // [T]
  Buffer<Storage> u;         // [T, H]
  Buffer<float> q_proj;      // [T, nh d]
  Buffer<float> q_rstd;      // [T, nh]
  Buffer<Storage> q;         // [T, nh d]
  Buffer<float> k_ctx_proj;  // [S, nkv d]
  Buffer<float> k_ctx_rstd;  // [S, nkv]
  Buffer<Storage> k_ctx;     // [S, nkv d]
  Buffer<Storage> v_ctx;     // [S, nkv d]
  Buffer<float> k_blk_proj;  // [T, nkv d]
  Buffer<float> k_blk_rstd;  // [T, nkv]
  Buffer<Storage> k_blk;     // [T, nkv d]
  Buffer<Storage> v_blk;     // [T, nkv d]
  Buffer<float> attn_lse;    // [T, nh]
  Buffer<Storage> attn_out;  // [T, nh d]
  Buffer<float> x_mid;       // [T, H]
  Buffer<float> post_rstd;   // [T]
  Buffer<Storage> v;         // [T, H]
  Buffer<Storage> gate;      // [T, I]
  Buffer<Storage> up;        // [T, I]
  Buffer<Storage> act;       // [T, I]

  TrunkLayerActivations(const Backend& be, const DrafterDims& m, MemoryCategory c)
      : input_rstd(f32(be, c, m.T)),
        u(st(be, c, m.T * m.H)),
        q_proj(f32(be, c, m.T * m.q_width())),
        q_rstd(f32(be, c, m.T * m.nh)),
        q(st(be, c, m.T * m.q_width())),
        k_ctx_proj(f32(be, c, m.S * m.kv_width())),
        k_ctx_rstd(f32(be, c, m.S * m.nkv)),
        k_ctx(st(be, c, m.S * m.kv_width())),
        v_ctx(st(be, c, m.S * m.kv_width())),
        k_blk_proj(f32(be, c, m.T * m.kv_width())),
        k_blk_rstd(f32(be, c, m.T * m.nkv)),
        k_blk(st(be, c, m.T * m.kv_width())),
        v_blk(st(be, c, m.T * m.kv_width())),
        attn_lse(f32(be, c, m.T * m.nh)),
        attn_out(st(be, c, m.T * m.q_width())),
        x_mid(f32(be, c, m.T * m.H)),
        post_rstd(f32(be, c, m.T)),
        v(st(be, c, m.T * m.H)),
        gate(st(be, c, m.T * m.I)),
        up(st(be, c, m.T * m.I)),
        act(st(be, c, m.T * m.I)) {}

  // Bytes per layer, from the closed form the memory plan uses (planner/cuda_trunk_memory.hpp).
  static std::size_t bytes(const DrafterDims& m) {
    return static_cast<std::size_t>(cuda_layer_activation_bytes(m, sizeof(Storage)));
  }

 private:
  static Buffer<float> f32(const Backend& be, MemoryCategory c, std::int64_t n) {
    return be.template buffer<float>(c, trunk_layer_detail::count(n));
  }
  static Buffer<Storage> st(const Backend& be, MemoryCategory c, std::int64_t n) {
    return be.template buffer<Storage>(c, trunk_layer_detail::count(n));
  }
};

// X [T, H] fp32 in, X'' [T, H] fp32 out (transient); fills `a`. `sliding`: the layer's type.
template <class Backend>
typename Backend::template Buffer<float> trunk_layer_forward(const Backend& be,
                                                             const TrunkLayerContext<typename Backend::Storage>& ctx,
                                                             std::int64_t layer, bool sliding,
                                                             const LayerWeights<typename Backend::Storage>& w,
                                                             const float* x, TrunkLayerActivations<Backend>& a) {
  using namespace trunk_layer_detail;
  using Storage = typename Backend::Storage;
  const DrafterDims& m = ctx.dims;
  auto f32 = [&](std::size_t n) { return be.template buffer<float>(MemoryCategory::transient, n); };

  be.rms_norm_forward(x, w.input_layernorm, m.T, m.H, ctx.eps, a.u.data(), a.input_rstd.data());
  be.linear_forward(a.u.data(), w.q_proj, a.q_proj.data(), m.T, m.q_width(), m.H);
  be.head_norm_rope_forward(a.q_proj.data(), w.q_norm, m.T, m.nh, m.d, ctx.eps, ctx.block_positions, ctx.rope_theta,
                            a.q.data(), a.q_rstd.data());
  be.linear_forward(ctx.context, w.k_proj, a.k_ctx_proj.data(), m.S, m.kv_width(), m.H);
  be.head_norm_rope_forward(a.k_ctx_proj.data(), w.k_norm, m.S, m.nkv, m.d, ctx.eps, ctx.context_positions,
                            ctx.rope_theta, a.k_ctx.data(), a.k_ctx_rstd.data());
  be.linear_forward(ctx.context, w.v_proj, a.v_ctx.data(), m.S, m.kv_width(), m.H);
  be.linear_forward(a.u.data(), w.k_proj, a.k_blk_proj.data(), m.T, m.kv_width(), m.H);
  be.head_norm_rope_forward(a.k_blk_proj.data(), w.k_norm, m.T, m.nkv, m.d, ctx.eps, ctx.block_positions,
                            ctx.rope_theta, a.k_blk.data(), a.k_blk_rstd.data());
  be.linear_forward(a.u.data(), w.v_proj, a.v_blk.data(), m.T, m.kv_width(), m.H);

  const AttentionOperands<Storage> in{a.q.data(),     a.k_ctx.data(), a.v_ctx.data(), a.k_blk.data(),
                                      a.v_blk.data(), nullptr,        nullptr,        nullptr};
  be.attention_forward(attention_problem(ctx, layer, sliding), in,
                       AttentionForwardOutputs<Storage>{a.attn_out.data(), a.attn_lse.data()});
  {
    auto attn_proj = f32(count(m.T, m.H));
    be.linear_forward(a.attn_out.data(), w.o_proj, attn_proj.data(), m.T, m.H, m.q_width());
    be.residual_dropout_forward(x, attn_proj.data(), m.T * m.H,
                                hidden_dropout(ctx, layer, DropoutSite::attention_residual), a.x_mid.data());
  }

  be.rms_norm_forward(a.x_mid.data(), w.post_attention_layernorm, m.T, m.H, ctx.eps, a.v.data(), a.post_rstd.data());
  be.linear_forward(a.v.data(), w.gate_proj, a.gate.data(), m.T, m.I, m.H);
  be.linear_forward(a.v.data(), w.up_proj, a.up.data(), m.T, m.I, m.H);
  be.swiglu_forward(a.gate.data(), a.up.data(), m.T * m.I, a.act.data());
  auto mlp_out = f32(count(m.T, m.H));
  be.linear_forward(a.act.data(), w.down_proj, mlp_out.data(), m.T, m.H, m.I);
  auto out = f32(count(m.T, m.H));
  be.residual_dropout_forward(a.x_mid.data(), mlp_out.data(), m.T * m.H,
                              hidden_dropout(ctx, layer, DropoutSite::mlp_residual), out.data());
  return out;
}

// Takes dL/dX'' (consumed) and returns dL/dX (transient); accumulates the layer's parameter
// gradients into `g` and dL/dC into d_context [S, H] (fp32).
template <class Backend>
typename Backend::template Buffer<float> trunk_layer_backward(
    const Backend& be, const TrunkLayerContext<typename Backend::Storage>& ctx, std::int64_t layer, bool sliding,
    const LayerWeights<typename Backend::Storage>& w, const float* x, const TrunkLayerActivations<Backend>& a,
    typename Backend::template Buffer<float> d_out, const LayerGrads& g, float* d_context) {
  using namespace trunk_layer_detail;
  using Storage = typename Backend::Storage;
  const DrafterDims& m = ctx.dims;
  auto f32 = [&](std::size_t n) { return be.template buffer<float>(MemoryCategory::transient, n); };

  // MLP branch: X'' = X' + dropout_3(act Wdown^T).
  auto d_v = f32(count(m.T, m.H));
  {
    auto d_mlp = f32(count(m.T, m.H));
    be.residual_dropout_backward(d_out.data(), m.T * m.H, hidden_dropout(ctx, layer, DropoutSite::mlp_residual),
                                 d_mlp.data());
    const auto d_mlp16 = narrowed(be, d_mlp);
    auto d_act = f32(count(m.T, m.I));
    be.linear_input_grad(d_mlp16.data(), w.down_proj, d_act.data(), m.T, m.H, m.I, false);
    be.linear_weight_grad(d_mlp16.data(), a.act.data(), g.down_proj, m.T, m.H, m.I);
    auto d_gate = f32(count(m.T, m.I)), d_up = f32(count(m.T, m.I));
    be.swiglu_backward(a.gate.data(), a.up.data(), d_act.data(), m.T * m.I, d_gate.data(), d_up.data());
    const auto d_gate16 = narrowed(be, d_gate), d_up16 = narrowed(be, d_up);
    be.linear_input_grad(d_gate16.data(), w.gate_proj, d_v.data(), m.T, m.I, m.H, false);
    be.linear_input_grad(d_up16.data(), w.up_proj, d_v.data(), m.T, m.I, m.H, true);
    be.linear_weight_grad(d_gate16.data(), a.v.data(), g.gate_proj, m.T, m.I, m.H);
    be.linear_weight_grad(d_up16.data(), a.v.data(), g.up_proj, m.T, m.I, m.H);
  }
  auto d_x = std::move(d_out);  // the residual path: dL/dX' starts as dL/dX''
  be.rms_norm_backward(a.x_mid.data(), w.post_attention_layernorm, a.post_rstd.data(), d_v.data(), m.T, m.H,
                       d_x.data());
  be.rms_norm_weight_grad(a.x_mid.data(), a.post_rstd.data(), d_v.data(), m.T, m.H, g.post_attention_layernorm);
  d_v.release();

  // Attention branch: X' = X + dropout_2(O Wo^T).
  auto d_q = f32(count(m.T, m.q_width()));
  auto d_k_ctx = f32(count(m.S, m.kv_width())), d_v_ctx = f32(count(m.S, m.kv_width()));
  auto d_k_blk = f32(count(m.T, m.kv_width())), d_v_blk = f32(count(m.T, m.kv_width()));
  {
    auto d_attn_proj = f32(count(m.T, m.H));
    be.residual_dropout_backward(d_x.data(), m.T * m.H, hidden_dropout(ctx, layer, DropoutSite::attention_residual),
                                 d_attn_proj.data());
    const auto d_attn_proj16 = narrowed(be, d_attn_proj);
    auto d_attn_out = f32(count(m.T, m.q_width()));
    be.linear_input_grad(d_attn_proj16.data(), w.o_proj, d_attn_out.data(), m.T, m.H, m.q_width(), false);
    be.linear_weight_grad(d_attn_proj16.data(), a.attn_out.data(), g.o_proj, m.T, m.H, m.q_width());
    const auto d_attn_out16 = narrowed(be, d_attn_out);
    auto delta = f32(count(m.T, m.nh));
    const AttentionOperands<Storage> in{a.q.data(),     a.k_ctx.data(),    a.v_ctx.data(),      a.k_blk.data(),
                                        a.v_blk.data(), a.attn_out.data(), d_attn_out16.data(), a.attn_lse.data()};
    be.attention_backward(
        attention_problem(ctx, layer, sliding), in,
        AttentionGradients{d_q.data(), d_k_ctx.data(), d_v_ctx.data(), d_k_blk.data(), d_v_blk.data(), delta.data()});
  }

  // q/k norms and RoPE (the gradients are rotated back in place, then read by the weight grads).
  auto d_q_proj = f32(count(m.T, m.q_width()));
  auto d_k_ctx_proj = f32(count(m.S, m.kv_width()));
  auto d_k_blk_proj = f32(count(m.T, m.kv_width()));
  be.head_norm_rope_backward(d_q.data(), a.q_proj.data(), w.q_norm, a.q_rstd.data(), m.T, m.nh, m.d,
                             ctx.block_positions, ctx.rope_theta, d_q_proj.data());
  be.rms_norm_weight_grad(a.q_proj.data(), a.q_rstd.data(), d_q.data(), m.T * m.nh, m.d, g.q_norm);
  be.head_norm_rope_backward(d_k_ctx.data(), a.k_ctx_proj.data(), w.k_norm, a.k_ctx_rstd.data(), m.S, m.nkv, m.d,
                             ctx.context_positions, ctx.rope_theta, d_k_ctx_proj.data());
  be.rms_norm_weight_grad(a.k_ctx_proj.data(), a.k_ctx_rstd.data(), d_k_ctx.data(), m.S * m.nkv, m.d, g.k_norm);
  be.head_norm_rope_backward(d_k_blk.data(), a.k_blk_proj.data(), w.k_norm, a.k_blk_rstd.data(), m.T, m.nkv, m.d,
                             ctx.block_positions, ctx.rope_theta, d_k_blk_proj.data());
  be.rms_norm_weight_grad(a.k_blk_proj.data(), a.k_blk_rstd.data(), d_k_blk.data(), m.T * m.nkv, m.d, g.k_norm);

  // The projections: context rows into dL/dC, block rows into dL/du.
  const auto d_q16 = narrowed(be, d_q_proj), d_kc16 = narrowed(be, d_k_ctx_proj), d_kb16 = narrowed(be, d_k_blk_proj),
             d_vc16 = narrowed(be, d_v_ctx), d_vb16 = narrowed(be, d_v_blk);
  auto d_u = f32(count(m.T, m.H));
  be.linear_input_grad(d_q16.data(), w.q_proj, d_u.data(), m.T, m.q_width(), m.H, false);
  be.linear_weight_grad(d_q16.data(), a.u.data(), g.q_proj, m.T, m.q_width(), m.H);
  be.linear_input_grad(d_kc16.data(), w.k_proj, d_context, m.S, m.kv_width(), m.H, true);
  be.linear_weight_grad(d_kc16.data(), ctx.context, g.k_proj, m.S, m.kv_width(), m.H);
  be.linear_input_grad(d_kb16.data(), w.k_proj, d_u.data(), m.T, m.kv_width(), m.H, true);
  be.linear_weight_grad(d_kb16.data(), a.u.data(), g.k_proj, m.T, m.kv_width(), m.H);
  be.linear_input_grad(d_vc16.data(), w.v_proj, d_context, m.S, m.kv_width(), m.H, true);
  be.linear_weight_grad(d_vc16.data(), ctx.context, g.v_proj, m.S, m.kv_width(), m.H);
  be.linear_input_grad(d_vb16.data(), w.v_proj, d_u.data(), m.T, m.kv_width(), m.H, true);
  be.linear_weight_grad(d_vb16.data(), a.u.data(), g.v_proj, m.T, m.kv_width(), m.H);

  be.rms_norm_backward(x, w.input_layernorm, a.input_rstd.data(), d_u.data(), m.T, m.H, d_x.data());
  be.rms_norm_weight_grad(x, a.input_rstd.data(), d_u.data(), m.T, m.H, g.input_layernorm);
  return d_x;
}

}  // namespace dflash
