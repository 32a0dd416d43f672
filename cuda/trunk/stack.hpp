// The drafter trunk of one sequence under a trunk policy (SPEC §3, §7), over a backend
// (cuda/trunk/layer.hpp: the GPU, or the CPU twin the CI tests run), the twin of
// reference/drafter_trunk.hpp:
//   C   = RMSNorm(F W_fc^T; w_hidden_norm)   once per step, shared by all layers (Storage)
//   X_0 = E[tok]                              (fp32 residual stream)
//   X_{l+1} = layer_l(X_l)                    cuda/trunk/layer.hpp
//   Y   = RMSNorm(X_L; w_norm)                (Storage: the loss head's input)
// What is kept from forward to backward, every byte counted by the backend's allocator:
//   saved       fc output [S,H] fp32, its rstd [S], C [S,H] Storage; X_L [T,H] fp32 and its rstd [T];
//               the layer inputs X_l [T,H] fp32 at the policy's boundaries (none: every layer,
//               per_layer: every layer, every_k: every k-th); under `none` also every layer's
//               TrunkLayerActivations (TrunkLayerActivations::bytes each)
//   saved during backward  one recomputed segment's activations and inner inputs (per_layer: one
//               layer's; every_k: k layers')
//   transient   each layer pass's scratch, the backward's running gradients
// A recomputed layer runs the same kernels on the same bits with the same dropout coordinates,
// so every policy gives bitwise the same gradients.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "cuda/trunk/layer.hpp"
#include "io/errors.hpp"
#include "reference/drafter_config.hpp"
#include "reference/drafter_trunk.hpp"
#include "reference/trunk_policy.hpp"

namespace dflash {

template <class Storage>
struct TrunkWeights {
  const Storage* embed_tokens = nullptr;  // E [V, H] (frozen)
  const Storage* fc = nullptr;            // [H, K H]
  const float* hidden_norm = nullptr;     // [H]
  std::vector<LayerWeights<Storage>> layers;
  std::vector<bool> sliding;    // per layer: sliding_attention
  const float* norm = nullptr;  // [H]
};

// fp32, accumulated (+=); target_features may be null (dL/dF not wanted).
struct TrunkGrads {
  float* fc = nullptr;
  float* hidden_norm = nullptr;
  std::vector<LayerGrads> layers;
  float* norm = nullptr;
  float* target_features = nullptr;  // [S, K H]
};

// Binds one pointer per trainable parameter, in DrafterParameters::for_each order (fc,
// hidden_norm, per layer input_layernorm, q, k, v, o, q_norm, k_norm, post_attention_layernorm,
// gate, up, down, then norm): matrices are Storage, norm weights fp32, gradients fp32.
template <class Storage>
void bind_trunk_parameters(const DrafterConfig& config, const std::vector<const void*>& values,
                           const std::vector<float*>& grads, const Storage* embed_tokens, TrunkWeights<Storage>& w,
                           TrunkGrads& g) {
  std::size_t at = 0;
  auto m = [&] { return static_cast<const Storage*>(values.at(at)); };
  auto v = [&] { return static_cast<const float*>(values.at(at)); };
  auto gr = [&] { return grads.at(at++); };
  w.embed_tokens = embed_tokens;
  w.fc = m(), g.fc = gr();
  w.hidden_norm = v(), g.hidden_norm = gr();
  for (std::int64_t l = 0; l < config.num_hidden_layers; ++l) {
    LayerWeights<Storage> lw{};
    LayerGrads lg{};
    lw.input_layernorm = v(), lg.input_layernorm = gr();
    lw.q_proj = m(), lg.q_proj = gr();
    lw.k_proj = m(), lg.k_proj = gr();
    lw.v_proj = m(), lg.v_proj = gr();
    lw.o_proj = m(), lg.o_proj = gr();
    lw.q_norm = v(), lg.q_norm = gr();
    lw.k_norm = v(), lg.k_norm = gr();
    lw.post_attention_layernorm = v(), lg.post_attention_layernorm = gr();
    lw.gate_proj = m(), lg.gate_proj = gr();
    lw.up_proj = m(), lg.up_proj = gr();
    lw.down_proj = m(), lg.down_proj = gr();
    w.layers.push_back(lw);
    g.layers.push_back(lg);
    w.sliding.push_back(config.layer_types.at(static_cast<std::size_t>(l)) == LayerType::sliding_attention);
  }
  w.norm = v(), g.norm = gr();
}

template <class Backend>
class Trunk {
 public:
  using Storage = typename Backend::Storage;
  template <class T>
  using Buffer = typename Backend::template Buffer<T>;

  // `ctx` holds the sequence's inputs (anchors, keep, positions, dropout coordinates); its
  // `context` is set by the trunk. features F [S, K H] and tokens [T] (tok(n,k), < V) must
  // outlive backward.
  Trunk(const Backend& backend, const TrunkWeights<Storage>& weights, TrunkLayerContext<Storage> ctx, std::int64_t K,
        const Storage* features, const std::int64_t* tokens, TrunkPolicy policy, std::int64_t checkpoint_every)
      : be_(backend),
        w_(weights),
        ctx_(ctx),
        K_(K),
        features_(features),
        tokens_(tokens),
        policy_(policy),
        segment_(trunk_segment_length(policy, checkpoint_every, ctx.dims.L)),
        inputs_(static_cast<std::size_t>(ctx.dims.L)),
        layers_(static_cast<std::size_t>(ctx.dims.L)) {
    const auto L = static_cast<std::size_t>(ctx.dims.L);
    if (weights.layers.size() != L || weights.sliding.size() != L) {
      throw_input_error("trunk weights", str(weights.layers.size(), " layers and ", weights.sliding.size(),
                                             " layer types for num_hidden_layers ", ctx.dims.L));
    }
  }

  // Y [T, H] in Storage (transient; the loss head's input). Keeps what the policy keeps.
  Buffer<Storage> forward() {
    using trunk_layer_detail::count;
    const DrafterDims& m = ctx_.dims;
    const MemoryCategory saved = MemoryCategory::saved;

    // C = RMSNorm(F W_fc^T), once for all layers.
    fc_out_ = be_.template buffer<float>(saved, count(m.S, m.H));
    hidden_rstd_ = be_.template buffer<float>(saved, count(m.S));
    context_ = be_.template buffer<Storage>(saved, count(m.S, m.H));
    be_.linear_forward(features_, w_.fc, fc_out_.data(), m.S, m.H, K_ * m.H);
    be_.rms_norm_forward(fc_out_.data(), w_.hidden_norm, m.S, m.H, ctx_.eps, context_.data(), hidden_rstd_.data());
    ctx_.context = context_.data();

    Buffer<float> current = be_.template buffer<float>(MemoryCategory::transient, count(m.T, m.H));
    be_.embedding_gather(tokens_, w_.embed_tokens, m.T, m.H, current.data());
    for (std::int64_t l = 0; l < m.L; ++l) {
      const float* x = current.data();
      if (is_boundary(l)) {
        current.recategorize(saved);
        inputs_[l] = std::move(current);
        x = inputs_[l].data();
      }
      const bool keep = policy_ == TrunkPolicy::none;
      TrunkLayerActivations<Backend> acts(be_, m, keep ? saved : MemoryCategory::transient);
      current = trunk_layer_forward(be_, ctx_, l, w_.sliding[l], w_.layers[l], x, acts);
      if (keep) layers_[l].emplace(std::move(acts));
    }

    Buffer<Storage> y = be_.template buffer<Storage>(MemoryCategory::transient, count(m.T, m.H));
    final_rstd_ = be_.template buffer<float>(saved, count(m.T));
    be_.rms_norm_forward(current.data(), w_.norm, m.T, m.H, ctx_.eps, y.data(), final_rstd_.data());
    current.recategorize(saved);
    final_input_ = std::move(current);
    return y;
  }

  // Takes dL/dY [T, H] fp32 (consumed); accumulates every trainable gradient; frees what forward
  // kept. `on_final`, when set, is told each time a group of parameter gradients is final, as the
  // reference trunk tells it (GradientsFinal, reference/drafter_trunk.hpp: norm.weight, each layer
  // from L-1 down to 0, then hidden_norm and fc): on the host, once every kernel writing those
  // gradients has been issued to the backend's stream, so that work issued after the call on a
  // stream ordered behind this one sees them final.
  void backward(Buffer<float> d_hidden, const TrunkGrads& grads, const GradientsFinal& on_final = {}) {
    using trunk_layer_detail::count;
    const DrafterDims& m = ctx_.dims;
    Buffer<float> d_x = be_.template buffer<float>(MemoryCategory::transient, count(m.T, m.H));
    d_x.zero();
    be_.rms_norm_backward(final_input_.data(), w_.norm, final_rstd_.data(), d_hidden.data(), m.T, m.H, d_x.data());
    be_.rms_norm_weight_grad(final_input_.data(), final_rstd_.data(), d_hidden.data(), m.T, m.H, grads.norm);
    d_hidden.release();
    final_input_.release();
    final_rstd_.release();
    if (on_final) on_final(first_layer_parameter(m.L));

    Buffer<float> d_context = be_.template buffer<float>(MemoryCategory::transient, count(m.S, m.H));
    d_context.zero();
    for (std::int64_t start = (m.L - 1) / segment_ * segment_; start >= 0; start -= segment_) {
      const std::int64_t end = std::min(start + segment_, m.L);
      if (policy_ != TrunkPolicy::none) recompute_segment(start, end);
      for (std::int64_t l = end - 1; l >= start; --l) {
        d_x = trunk_layer_backward(be_, ctx_, l, w_.sliding[l], w_.layers[l], inputs_[l].data(), *layers_[l],
                                   std::move(d_x), grads.layers[l], d_context.data());
        layers_[l].reset();
        inputs_[l].release();
        if (on_final) on_final(first_layer_parameter(l));
      }
    }
    d_x.release();

    // C = RMSNorm(F W_fc^T): dL/d(fc output), then W_fc's gradient (and F's, when wanted).
    Buffer<float> d_fc_out = be_.template buffer<float>(MemoryCategory::transient, count(m.S, m.H));
    d_fc_out.zero();
    be_.rms_norm_backward(fc_out_.data(), w_.hidden_norm, hidden_rstd_.data(), d_context.data(), m.S, m.H,
                          d_fc_out.data());
    be_.rms_norm_weight_grad(fc_out_.data(), hidden_rstd_.data(), d_context.data(), m.S, m.H, grads.hidden_norm);
    d_context.release();
    const Buffer<Storage> d_fc = trunk_layer_detail::narrowed(be_, d_fc_out);
    be_.linear_weight_grad(d_fc.data(), features_, grads.fc, m.S, m.H, K_ * m.H);
    if (grads.target_features != nullptr) {
      be_.linear_input_grad(d_fc.data(), w_.fc, grads.target_features, m.S, m.H, K_ * m.H, true);
    }
    fc_out_.release();
    hidden_rstd_.release();
    context_.release();
    if (on_final) on_final(0);
  }

 private:
  bool is_boundary(std::int64_t l) const { return policy_ == TrunkPolicy::none || l % segment_ == 0; }

  void recompute_segment(std::int64_t start, std::int64_t end) {
    for (std::int64_t l = start; l < end; ++l) {
      layers_[l].emplace(be_, ctx_.dims, MemoryCategory::saved);
      Buffer<float> out =
          trunk_layer_forward(be_, ctx_, l, w_.sliding[l], w_.layers[l], inputs_[l].data(), *layers_[l]);
      if (l + 1 < end) {
        out.recategorize(MemoryCategory::saved);
        inputs_[l + 1] = std::move(out);
      }
    }
  }

  const Backend& be_;
  const TrunkWeights<Storage>& w_;
  TrunkLayerContext<Storage> ctx_;
  std::int64_t K_;
  const Storage* features_;
  const std::int64_t* tokens_;
  TrunkPolicy policy_;
  std::int64_t segment_;
  Buffer<float> fc_out_, hidden_rstd_;
  Buffer<Storage> context_;
  std::vector<Buffer<float>> inputs_;                                  // X_l where kept
  std::vector<std::optional<TrunkLayerActivations<Backend>>> layers_;  // none: all; else the live segment
  Buffer<float> final_input_, final_rstd_;
};

}  // namespace dflash
