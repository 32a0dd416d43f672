// The drafter trunk of one sequence (SPEC §3) under a trunk policy (SPEC §7):
//   C = RMSNorm(F W_fc^T; w_hidden_norm)     once, shared by all layers
//   X_0 = E[tok]                              block embedding with mask tokens
//   X_{l+1} = layer_l(X_l)                    reference/drafter_layer.hpp
//   Y = RMSNorm(X_L; w_norm)
// What each policy keeps, and when it is freed, is listed in reference/trunk_memory.hpp; this
// file is the code that list describes. A recomputed layer runs the same code on the same bits
// (its input is a kept boundary, its masks are regenerated from their coordinates), so every
// policy gives bitwise the same gradients.
#pragma once

#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "reference/drafter_layer.hpp"
#include "reference/trunk_memory.hpp"
#include "reference/trunk_policy.hpp"

namespace dflash {

// One sequence's read-only inputs to the trunk (all outlive the SequenceTrunk).
template <class Real>
struct TrunkInputs {
  DrafterDims dims;
  const Real* target_features = nullptr;          // F [S, K H]
  std::span<const std::int64_t> anchors;          // [N]
  std::span<const std::uint8_t> keep;             // [N]
  std::span<const std::int64_t> input_tokens;     // [T] tok(n,k)
  std::span<const std::int64_t> block_positions;  // [T] a_n + k
  DropoutCoordinates dropout;                     // seed, step, global sequence, observer
};

// Positions in drafter_parameter_shapes order (TRAINING §12's flat order): fc 0, hidden_norm 1,
// layer l's eleven tensors from first_layer_parameter(l) on, norm.weight at first_layer_parameter(L).
inline constexpr std::size_t kParametersPerLayer = 11;
inline constexpr std::size_t first_layer_parameter(std::int64_t layer) {
  return 2 + kParametersPerLayer * static_cast<std::size_t>(layer);
}

// Told during a backward that the gradients of the parameters from position `first` on are final
// for this sequence. Backward finishes them from the end of the order: norm.weight, then each layer
// from L-1 down to 0, then hidden_norm and fc (first = 0). A training step can then reduce what is
// final while the rest of the backward runs.
using GradientsFinal = std::function<void(std::size_t first)>;

template <class Real>
class SequenceTrunk {
 public:
  SequenceTrunk(MemoryTracker& tracker, const DrafterConfig& config, const DrafterParameters<Real>& params,
                const FrozenWeights<Real>& frozen, const TrunkInputs<Real>& in, TrunkPolicy policy,
                std::int64_t checkpoint_every)
      : tracker_(tracker),
        params_(params),
        frozen_(frozen),
        in_(in),
        policy_(policy),
        segment_(trunk_segment_length(policy, checkpoint_every, in.dims.L)),
        context_positions_(static_cast<std::size_t>(in.dims.S)),
        inputs_(static_cast<std::size_t>(in.dims.L)),
        layers_(static_cast<std::size_t>(in.dims.L)) {
    std::iota(context_positions_.begin(), context_positions_.end(), std::int64_t(0));
    ctx_.config = &config;
    ctx_.dims = in.dims;
    ctx_.anchors = in.anchors;
    ctx_.keep = in.keep;
    ctx_.block_positions = in.block_positions;
    ctx_.context_positions = context_positions_;
    ctx_.dropout = in.dropout;
  }
  SequenceTrunk(const SequenceTrunk&) = delete;
  SequenceTrunk& operator=(const SequenceTrunk&) = delete;

  // Returns Y [T, H] (transient). With keep_for_backward, what the policy keeps goes to
  // MemoryCategory::saved; without it everything is transient (a forward-only evaluation).
  Tensor<Real> forward(bool keep_for_backward) {
    const DrafterDims& m = in_.dims;
    const MemoryCategory kept = keep_for_backward ? MemoryCategory::saved : MemoryCategory::transient;
    ctx_.dropout.pass = DropoutPass::forward;
    context_forward(kept);

    Tensor<Real> current = block_embedding();
    const Tensor<Real>* x = &current;
    for (std::int64_t l = 0; l < m.L; ++l) {
      if (keep_for_backward && is_boundary(l)) {
        current.recategorize(MemoryCategory::saved);
        inputs_[l] = std::move(current);
        x = &inputs_[l];
      }
      const bool keep_activations = keep_for_backward && policy_ == TrunkPolicy::none;
      LayerActivations<Real> acts(tracker_, m, keep_activations ? MemoryCategory::saved : MemoryCategory::transient);
      Tensor<Real> out = drafter_layer_forward(tracker_, ctx_, l, params_.layers[l], *x, acts);
      if (keep_activations) layers_[l].emplace(std::move(acts));
      current = std::move(out);
      x = &current;
    }

    Tensor<Real> y(tracker_, MemoryCategory::transient, {m.T, m.H});
    Tensor<Real> rstd(tracker_, kept, {m.T});
    const Real eps(ctx_.config->rms_norm_eps);
    for (std::int64_t i = 0; i < m.T; ++i) rstd[i] = rms_norm_forward(current.row(i), params_.norm.data(), m.H, eps, y.row(i));
    if (keep_for_backward) {
      current.recategorize(MemoryCategory::saved);
      final_input_ = std::move(current);
      final_rstd_ = std::move(rstd);
    }
    return y;
  }

  // Takes dL/dY (consumed), accumulates every parameter gradient into `grads`, and returns
  // dL/dF [S, K H] (MemoryCategory::gradients). Frees what forward kept as it goes. `on_final`, when
  // set, is told each time a group of parameter gradients is final (GradientsFinal).
  Tensor<Real> backward(Tensor<Real> d_hidden, DrafterParameters<Real>& grads, const GradientsFinal& on_final = {}) {
    const DrafterDims& m = in_.dims;
    Tensor<Real> d_x(tracker_, MemoryCategory::transient, {m.T, m.H});
    for (std::int64_t i = 0; i < m.T; ++i) {
      rms_norm_backward(final_input_.row(i), params_.norm.data(), final_rstd_[i], d_hidden.row(i), m.H, d_x.row(i),
                        grads.norm.data());
    }
    d_hidden.release();
    final_input_.release();
    final_rstd_.release();
    if (on_final) on_final(first_layer_parameter(m.L));

    Tensor<Real> d_context(tracker_, MemoryCategory::transient, {m.S, m.H});
    for (std::int64_t start = (m.L - 1) / segment_ * segment_; start >= 0; start -= segment_) {
      const std::int64_t end = std::min(start + segment_, m.L);
      if (policy_ != TrunkPolicy::none) recompute_segment(start, end);
      ctx_.dropout.pass = DropoutPass::backward;
      for (std::int64_t l = end - 1; l >= start; --l) {
        d_x = drafter_layer_backward(tracker_, ctx_, l, params_.layers[l], inputs_[l], *layers_[l], std::move(d_x),
                                     grads.layers[l], d_context);
        layers_[l].reset();
        inputs_[l].release();
        if (on_final) on_final(first_layer_parameter(l));
      }
    }
    d_x.release();
    Tensor<Real> d_features = context_backward(d_context, grads);
    if (on_final) on_final(0);
    return d_features;
  }

 private:
  // Layers whose input the forward keeps: every layer under `none`, segment starts otherwise.
  bool is_boundary(std::int64_t layer) const { return policy_ == TrunkPolicy::none || layer % segment_ == 0; }

  // C = RMSNorm(F W_fc^T; w_hidden_norm).
  void context_forward(MemoryCategory category) {
    const DrafterDims& m = in_.dims;
    fc_out_ = Tensor<Real>(tracker_, category, {m.S, m.H});
    hidden_norm_rstd_ = Tensor<Real>(tracker_, category, {m.S});
    context_ = Tensor<Real>(tracker_, category, {m.S, m.H});
    matmul_abt(in_.target_features, params_.fc.data(), fc_out_.data(), m.S, m.H, m.feature_width());
    const Real eps(ctx_.config->rms_norm_eps);
    for (std::int64_t j = 0; j < m.S; ++j) {
      hidden_norm_rstd_[j] = rms_norm_forward(fc_out_.row(j), params_.hidden_norm.data(), m.H, eps, context_.row(j));
    }
    ctx_.context = &context_;
  }

  Tensor<Real> context_backward(const Tensor<Real>& d_context, DrafterParameters<Real>& grads) {
    const DrafterDims& m = in_.dims;
    Tensor<Real> d_fc_out(tracker_, MemoryCategory::transient, {m.S, m.H});
    for (std::int64_t j = 0; j < m.S; ++j) {
      rms_norm_backward(fc_out_.row(j), params_.hidden_norm.data(), hidden_norm_rstd_[j], d_context.row(j), m.H,
                        d_fc_out.row(j), grads.hidden_norm.data());
    }
    Tensor<Real> d_features(tracker_, MemoryCategory::gradients, {m.S, m.feature_width()});
    matmul_ab_accumulate(d_fc_out.data(), params_.fc.data(), d_features.data(), m.S, m.feature_width(), m.H);
    matmul_atb_accumulate(d_fc_out.data(), in_.target_features, grads.fc.data(), m.H, m.feature_width(), m.S);
    fc_out_.release();
    hidden_norm_rstd_.release();
    context_.release();
    return d_features;
  }

  // X_0 row n B + k = E[tok(n,k)].
  Tensor<Real> block_embedding() const {
    const DrafterDims& m = in_.dims;
    Tensor<Real> x(tracker_, MemoryCategory::transient, {m.T, m.H});
    for (std::int64_t i = 0; i < m.T; ++i) {
      const Real* e = frozen_.embed_tokens.row(in_.input_tokens[i]);
      std::copy(e, e + m.H, x.row(i));
    }
    return x;
  }

  // Rebuilds layers [start, end) from the kept boundary X_start: their activations and the
  // inputs of the layers after the first (the live segment, MemoryCategory::saved).
  void recompute_segment(std::int64_t start, std::int64_t end) {
    ctx_.dropout.pass = DropoutPass::recompute;
    for (std::int64_t l = start; l < end; ++l) {
      layers_[l].emplace(tracker_, in_.dims, MemoryCategory::saved);
      Tensor<Real> out = drafter_layer_forward(tracker_, ctx_, l, params_.layers[l], inputs_[l], *layers_[l]);
      if (l + 1 < end) {
        out.recategorize(MemoryCategory::saved);
        inputs_[l + 1] = std::move(out);
      }
    }
  }

  MemoryTracker& tracker_;
  const DrafterParameters<Real>& params_;
  const FrozenWeights<Real>& frozen_;
  TrunkInputs<Real> in_;
  TrunkPolicy policy_;
  std::int64_t segment_;
  std::vector<std::int64_t> context_positions_;
  LayerContext<Real> ctx_;
  Tensor<Real> fc_out_, hidden_norm_rstd_, context_;
  std::vector<Tensor<Real>> inputs_;                           // X_l where kept (boundaries)
  std::vector<std::optional<LayerActivations<Real>>> layers_;  // none: all; otherwise the live segment
  Tensor<Real> final_input_, final_rstd_;
};

}  // namespace dflash
