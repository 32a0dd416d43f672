#include "cuda/trunk_layer_cuda.hpp"

#include <utility>

#include "common/dropout_site_view.hpp"
#include "cuda/attention_kernels.hpp"
#include "cuda/trunk_elementwise_kernels.hpp"

namespace dflash {
namespace {

std::size_t count(std::int64_t a, std::int64_t b = 1) { return static_cast<std::size_t>(a * b); }

AttentionProblem attention_problem(const CudaLayerContext& ctx, std::int64_t layer, bool sliding) {
  const DrafterDims& m = ctx.dims;
  AttentionProblem pb;
  pb.tiling = AttentionTiling{m.S, m.N, m.B, m.nh, m.nkv, m.d, ctx.key_tile};
  pb.mask = AttentionMaskView{ctx.anchors, ctx.keep, m.S, m.B, sliding, ctx.sliding_window};
  pb.dropout = dropout_site_view(ctx.seed, ctx.step, ctx.sequence, static_cast<std::uint32_t>(layer),
                                 DropoutSite::attention_probs, ctx.attention_dropout);
  return pb;
}

DropoutSiteView hidden_dropout(const CudaLayerContext& ctx, std::int64_t layer, DropoutSite site) {
  return dropout_site_view(ctx.seed, ctx.step, ctx.sequence, static_cast<std::uint32_t>(layer), site,
                           ctx.hidden_dropout);
}

// Scratch buffers of one layer pass, transient.
struct Scratch {
  DeviceAllocator& allocator;
  DeviceBuffer<float> f32(std::size_t n) const { return DeviceBuffer<float>(allocator, MemoryCategory::transient, n); }
  // x rounded to bf16: the GEMM operand of an fp32 gradient.
  DeviceBuffer<Bf16Bits> bf16_of(const DeviceBuffer<float>& x) const {
    DeviceBuffer<Bf16Bits> y(allocator, MemoryCategory::transient, x.size());
    launch_narrow(x.data(), static_cast<std::int64_t>(x.size()), y.data(), allocator.stream());
    return y;
  }
};

}  // namespace

CudaLayerActivations::CudaLayerActivations(DeviceAllocator& a, const DrafterDims& m, MemoryCategory c)
    : input_rstd(a, c, count(m.T)),
      u(a, c, count(m.T, m.H)),
      q_proj(a, c, count(m.T, m.q_width())),
      q_rstd(a, c, count(m.T, m.nh)),
      q(a, c, count(m.T, m.q_width())),
      k_ctx_proj(a, c, count(m.S, m.kv_width())),
      k_ctx_rstd(a, c, count(m.S, m.nkv)),
      k_ctx(a, c, count(m.S, m.kv_width())),
      v_ctx(a, c, count(m.S, m.kv_width())),
      k_blk_proj(a, c, count(m.T, m.kv_width())),
      k_blk_rstd(a, c, count(m.T, m.nkv)),
      k_blk(a, c, count(m.T, m.kv_width())),
      v_blk(a, c, count(m.T, m.kv_width())),
      attn_lse(a, c, count(m.T, m.nh)),
      attn_out(a, c, count(m.T, m.q_width())),
      x_mid(a, c, count(m.T, m.H)),
      post_rstd(a, c, count(m.T)),
      v(a, c, count(m.T, m.H)),
      gate(a, c, count(m.T, m.I)),
      up(a, c, count(m.T, m.I)),
      act(a, c, count(m.T, m.I)) {}

std::size_t CudaLayerActivations::bytes(const DrafterDims& m) {
  const std::size_t f = sizeof(float), b = sizeof(Bf16Bits);
  return f * (count(m.T) * 2 + count(m.T, m.nh) * 2 + count(m.S, m.nkv) + count(m.T, m.nkv)) +  // statistics
         f * (count(m.T, m.q_width()) + count(m.S, m.kv_width()) + count(m.T, m.kv_width())) +   // q/k projections
         f * count(m.T, m.H) +                                                                     // X'
         b * (count(m.T, m.H) * 2 + count(m.T, m.q_width()) * 2 + count(m.S, m.kv_width()) * 2 +
              count(m.T, m.kv_width()) * 2 + count(m.T, m.I) * 3);                                 // bf16 operands
}

DeviceBuffer<float> cuda_layer_forward(DeviceAllocator& allocator, LinearGemm& gemm, const CudaLayerContext& ctx,
                                       std::int64_t layer, bool sliding, const CudaLayerWeights& w, const float* x,
                                       CudaLayerActivations& a) {
  const DrafterDims& m = ctx.dims;
  const cudaStream_t stream = allocator.stream();
  const Scratch scratch{allocator};

  launch_rms_norm_forward(x, w.input_layernorm, m.T, m.H, ctx.eps, a.u.data(), a.input_rstd.data(), stream);
  gemm.forward(a.u.data(), w.q_proj, a.q_proj.data(), m.T, m.q_width(), m.H);
  launch_head_norm_rope_forward(a.q_proj.data(), w.q_norm, m.T, m.nh, m.d, ctx.eps, ctx.block_positions,
                                ctx.rope_theta, a.q.data(), a.q_rstd.data(), stream);
  gemm.forward(ctx.context, w.k_proj, a.k_ctx_proj.data(), m.S, m.kv_width(), m.H);
  launch_head_norm_rope_forward(a.k_ctx_proj.data(), w.k_norm, m.S, m.nkv, m.d, ctx.eps, ctx.context_positions,
                                ctx.rope_theta, a.k_ctx.data(), a.k_ctx_rstd.data(), stream);
  gemm.forward(ctx.context, w.v_proj, a.v_ctx.data(), m.S, m.kv_width(), m.H);
  gemm.forward(a.u.data(), w.k_proj, a.k_blk_proj.data(), m.T, m.kv_width(), m.H);
  launch_head_norm_rope_forward(a.k_blk_proj.data(), w.k_norm, m.T, m.nkv, m.d, ctx.eps, ctx.block_positions,
                                ctx.rope_theta, a.k_blk.data(), a.k_blk_rstd.data(), stream);
  gemm.forward(a.u.data(), w.v_proj, a.v_blk.data(), m.T, m.kv_width(), m.H);

  const AttentionOperands<Bf16Bits> in{a.q.data(), a.k_ctx.data(), a.v_ctx.data(), a.k_blk.data(), a.v_blk.data(),
                                       nullptr,    nullptr,         nullptr};
  launch_attention_forward(attention_problem(ctx, layer, sliding), in,
                           AttentionForwardOutputs<Bf16Bits>{a.attn_out.data(), a.attn_lse.data()}, stream);
  {
    DeviceBuffer<float> attn_proj = scratch.f32(count(m.T, m.H));
    gemm.forward(a.attn_out.data(), w.o_proj, attn_proj.data(), m.T, m.H, m.q_width());
    launch_residual_dropout_forward(x, attn_proj.data(), m.T * m.H,
                                    hidden_dropout(ctx, layer, DropoutSite::attention_residual), a.x_mid.data(), stream);
  }

  launch_rms_norm_forward(a.x_mid.data(), w.post_attention_layernorm, m.T, m.H, ctx.eps, a.v.data(), a.post_rstd.data(),
                          stream);
  gemm.forward(a.v.data(), w.gate_proj, a.gate.data(), m.T, m.I, m.H);
  gemm.forward(a.v.data(), w.up_proj, a.up.data(), m.T, m.I, m.H);
  launch_swiglu_forward(a.gate.data(), a.up.data(), m.T * m.I, a.act.data(), stream);
  DeviceBuffer<float> mlp_out = scratch.f32(count(m.T, m.H));
  gemm.forward(a.act.data(), w.down_proj, mlp_out.data(), m.T, m.H, m.I);
  DeviceBuffer<float> out = scratch.f32(count(m.T, m.H));
  launch_residual_dropout_forward(a.x_mid.data(), mlp_out.data(), m.T * m.H,
                                  hidden_dropout(ctx, layer, DropoutSite::mlp_residual), out.data(), stream);
  return out;
}

DeviceBuffer<float> cuda_layer_backward(DeviceAllocator& allocator, LinearGemm& gemm, const CudaLayerContext& ctx,
                                        std::int64_t layer, bool sliding, const CudaLayerWeights& w, const float* x,
                                        const CudaLayerActivations& a, DeviceBuffer<float> d_out,
                                        const CudaLayerGrads& g, float* d_context) {
  const DrafterDims& m = ctx.dims;
  const cudaStream_t stream = allocator.stream();
  const Scratch scratch{allocator};

  // MLP branch: X'' = X' + dropout_3(act Wdown^T).
  DeviceBuffer<float> d_v = scratch.f32(count(m.T, m.H));
  {
    DeviceBuffer<float> d_mlp = scratch.f32(count(m.T, m.H));
    launch_residual_dropout_backward(d_out.data(), m.T * m.H, hidden_dropout(ctx, layer, DropoutSite::mlp_residual),
                                     d_mlp.data(), stream);
    const DeviceBuffer<Bf16Bits> d_mlp16 = scratch.bf16_of(d_mlp);
    DeviceBuffer<float> d_act = scratch.f32(count(m.T, m.I));
    gemm.input_grad(d_mlp16.data(), w.down_proj, d_act.data(), m.T, m.H, m.I, false);
    gemm.weight_grad(d_mlp16.data(), a.act.data(), g.down_proj, m.T, m.H, m.I);
    DeviceBuffer<float> d_gate = scratch.f32(count(m.T, m.I)), d_up = scratch.f32(count(m.T, m.I));
    launch_swiglu_backward(a.gate.data(), a.up.data(), d_act.data(), m.T * m.I, d_gate.data(), d_up.data(), stream);
    const DeviceBuffer<Bf16Bits> d_gate16 = scratch.bf16_of(d_gate), d_up16 = scratch.bf16_of(d_up);
    gemm.input_grad(d_gate16.data(), w.gate_proj, d_v.data(), m.T, m.I, m.H, false);
    gemm.input_grad(d_up16.data(), w.up_proj, d_v.data(), m.T, m.I, m.H, true);
    gemm.weight_grad(d_gate16.data(), a.v.data(), g.gate_proj, m.T, m.I, m.H);
    gemm.weight_grad(d_up16.data(), a.v.data(), g.up_proj, m.T, m.I, m.H);
  }
  DeviceBuffer<float> d_x = std::move(d_out);  // the residual path: dL/dX' starts as dL/dX''
  launch_rms_norm_backward(a.x_mid.data(), w.post_attention_layernorm, a.post_rstd.data(), d_v.data(), m.T, m.H,
                           d_x.data(), stream);
  launch_rms_norm_weight_grad(a.x_mid.data(), a.post_rstd.data(), d_v.data(), m.T, m.H, g.post_attention_layernorm,
                              stream);
  d_v.release();

  // Attention branch: X' = X + dropout_2(O Wo^T).
  DeviceBuffer<float> d_q = scratch.f32(count(m.T, m.q_width()));
  DeviceBuffer<float> d_k_ctx = scratch.f32(count(m.S, m.kv_width())), d_v_ctx = scratch.f32(count(m.S, m.kv_width()));
  DeviceBuffer<float> d_k_blk = scratch.f32(count(m.T, m.kv_width())), d_v_blk = scratch.f32(count(m.T, m.kv_width()));
  {
    DeviceBuffer<float> d_attn_proj = scratch.f32(count(m.T, m.H));
    launch_residual_dropout_backward(d_x.data(), m.T * m.H,
                                     hidden_dropout(ctx, layer, DropoutSite::attention_residual), d_attn_proj.data(),
                                     stream);
    const DeviceBuffer<Bf16Bits> d_attn_proj16 = scratch.bf16_of(d_attn_proj);
    DeviceBuffer<float> d_attn_out = scratch.f32(count(m.T, m.q_width()));
    gemm.input_grad(d_attn_proj16.data(), w.o_proj, d_attn_out.data(), m.T, m.H, m.q_width(), false);
    gemm.weight_grad(d_attn_proj16.data(), a.attn_out.data(), g.o_proj, m.T, m.H, m.q_width());
    const DeviceBuffer<Bf16Bits> d_attn_out16 = scratch.bf16_of(d_attn_out);
    DeviceBuffer<float> delta = scratch.f32(count(m.T, m.nh));
    const AttentionOperands<Bf16Bits> in{a.q.data(),     a.k_ctx.data(),     a.v_ctx.data(),  a.k_blk.data(),
                                         a.v_blk.data(), a.attn_out.data(), d_attn_out16.data(), a.attn_lse.data()};
    launch_attention_backward(attention_problem(ctx, layer, sliding), in,
                              AttentionGradients{d_q.data(), d_k_ctx.data(), d_v_ctx.data(), d_k_blk.data(),
                                                 d_v_blk.data(), delta.data()},
                              stream);
  }

  // q/k norms and RoPE (the gradients are rotated back in place, then read by the weight grads).
  DeviceBuffer<float> d_q_proj = scratch.f32(count(m.T, m.q_width()));
  DeviceBuffer<float> d_k_ctx_proj = scratch.f32(count(m.S, m.kv_width()));
  DeviceBuffer<float> d_k_blk_proj = scratch.f32(count(m.T, m.kv_width()));
  launch_head_norm_rope_backward(d_q.data(), a.q_proj.data(), w.q_norm, a.q_rstd.data(), m.T, m.nh, m.d,
                                 ctx.block_positions, ctx.rope_theta, d_q_proj.data(), stream);
  launch_rms_norm_weight_grad(a.q_proj.data(), a.q_rstd.data(), d_q.data(), m.T * m.nh, m.d, g.q_norm, stream);
  launch_head_norm_rope_backward(d_k_ctx.data(), a.k_ctx_proj.data(), w.k_norm, a.k_ctx_rstd.data(), m.S, m.nkv, m.d,
                                 ctx.context_positions, ctx.rope_theta, d_k_ctx_proj.data(), stream);
  launch_rms_norm_weight_grad(a.k_ctx_proj.data(), a.k_ctx_rstd.data(), d_k_ctx.data(), m.S * m.nkv, m.d, g.k_norm,
                              stream);
  launch_head_norm_rope_backward(d_k_blk.data(), a.k_blk_proj.data(), w.k_norm, a.k_blk_rstd.data(), m.T, m.nkv, m.d,
                                 ctx.block_positions, ctx.rope_theta, d_k_blk_proj.data(), stream);
  launch_rms_norm_weight_grad(a.k_blk_proj.data(), a.k_blk_rstd.data(), d_k_blk.data(), m.T * m.nkv, m.d, g.k_norm,
                              stream);

  // The projections: context rows into dL/dC, block rows into dL/du.
  const DeviceBuffer<Bf16Bits> d_q16 = scratch.bf16_of(d_q_proj), d_kc16 = scratch.bf16_of(d_k_ctx_proj),
                               d_kb16 = scratch.bf16_of(d_k_blk_proj), d_vc16 = scratch.bf16_of(d_v_ctx),
                               d_vb16 = scratch.bf16_of(d_v_blk);
  DeviceBuffer<float> d_u = scratch.f32(count(m.T, m.H));
  gemm.input_grad(d_q16.data(), w.q_proj, d_u.data(), m.T, m.q_width(), m.H, false);
  gemm.weight_grad(d_q16.data(), a.u.data(), g.q_proj, m.T, m.q_width(), m.H);
  gemm.input_grad(d_kc16.data(), w.k_proj, d_context, m.S, m.kv_width(), m.H, true);
  gemm.weight_grad(d_kc16.data(), ctx.context, g.k_proj, m.S, m.kv_width(), m.H);
  gemm.input_grad(d_kb16.data(), w.k_proj, d_u.data(), m.T, m.kv_width(), m.H, true);
  gemm.weight_grad(d_kb16.data(), a.u.data(), g.k_proj, m.T, m.kv_width(), m.H);
  gemm.input_grad(d_vc16.data(), w.v_proj, d_context, m.S, m.kv_width(), m.H, true);
  gemm.weight_grad(d_vc16.data(), ctx.context, g.v_proj, m.S, m.kv_width(), m.H);
  gemm.input_grad(d_vb16.data(), w.v_proj, d_u.data(), m.T, m.kv_width(), m.H, true);
  gemm.weight_grad(d_vb16.data(), a.u.data(), g.v_proj, m.T, m.kv_width(), m.H);

  launch_rms_norm_backward(x, w.input_layernorm, a.input_rstd.data(), d_u.data(), m.T, m.H, d_x.data(), stream);
  launch_rms_norm_weight_grad(x, a.input_rstd.data(), d_u.data(), m.T, m.H, g.input_layernorm, stream);
  return d_x;
}

}  // namespace dflash
