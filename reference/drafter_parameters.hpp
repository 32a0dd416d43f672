// The drafter's trainable parameters under their Hugging Face names (SPEC §3, no `model.`
// prefix), the frozen embedding and lm_head, and deterministic initialisation from a seed.
// The same struct holds gradients (allocated in MemoryCategory::gradients).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reference/counter_rng.hpp"
#include "reference/drafter_config.hpp"
#include "reference/loss_head_types.hpp"
#include "reference/tensor.hpp"

namespace dflash {

struct ParameterShape {
  std::string name;
  Shape shape;
};

// Every trainable parameter of a config, in module order: fc, hidden_norm, layers.0..L-1, norm.
std::vector<ParameterShape> drafter_parameter_shapes(const DrafterConfig& config);
std::int64_t drafter_parameter_count(const DrafterConfig& config);
// Their element counts, in the same order.
std::vector<std::int64_t> parameter_sizes(const std::vector<ParameterShape>& shapes);

// The parameters as one flat vector (TRAINING §12: canonical order, each C-order, concatenated;
// P = the sum of `sizes`): the runs of flat elements [begin, begin + n) that lie inside one
// parameter each, in order: its index, the first element within it, the position within the
// range, the length. Elements before 0 or at or beyond P (ZeRO-1's padding) are in no run. Every
// reader or writer of a range of the flat vector (optimizer parts, checkpoint slices, the seeded
// init, --init's weights) goes through it.
struct FlatRun {
  std::size_t tensor;
  std::int64_t at, position, length;
};
std::vector<FlatRun> flat_runs(std::span<const std::int64_t> sizes, std::int64_t begin, std::int64_t n);

template <class Real>
struct DrafterLayerParameters {
  Tensor<Real> input_layernorm;           // [H]
  Tensor<Real> q_proj;                    // [nh d, H]
  Tensor<Real> k_proj;                    // [nkv d, H]
  Tensor<Real> v_proj;                    // [nkv d, H]
  Tensor<Real> o_proj;                    // [H, nh d]
  Tensor<Real> q_norm;                    // [d]
  Tensor<Real> k_norm;                    // [d]
  Tensor<Real> post_attention_layernorm;  // [H]
  Tensor<Real> gate_proj;                 // [I, H]
  Tensor<Real> up_proj;                   // [I, H]
  Tensor<Real> down_proj;                 // [H, I]
};

template <class Real>
struct DrafterParameters {
  Tensor<Real> fc;           // [H, K H]
  Tensor<Real> hidden_norm;  // [H]
  std::vector<DrafterLayerParameters<Real>> layers;
  Tensor<Real> norm;  // [H]

  // Calls visit(name, tensor) for every parameter, in the order of drafter_parameter_shapes.
  template <class Visit>
  void for_each(Visit&& visit) {
    visit_all(*this, visit);
  }
  template <class Visit>
  void for_each(Visit&& visit) const {
    visit_all(*this, visit);
  }

 private:
  template <class Self, class Visit>
  static void visit_all(Self& p, Visit& visit) {
    visit(std::string("fc.weight"), p.fc);
    visit(std::string("hidden_norm.weight"), p.hidden_norm);
    for (std::size_t l = 0; l < p.layers.size(); ++l) {
      auto& layer = p.layers[l];
      const std::string at = "layers." + std::to_string(l) + ".";
      visit(at + "input_layernorm.weight", layer.input_layernorm);
      visit(at + "self_attn.q_proj.weight", layer.q_proj);
      visit(at + "self_attn.k_proj.weight", layer.k_proj);
      visit(at + "self_attn.v_proj.weight", layer.v_proj);
      visit(at + "self_attn.o_proj.weight", layer.o_proj);
      visit(at + "self_attn.q_norm.weight", layer.q_norm);
      visit(at + "self_attn.k_norm.weight", layer.k_norm);
      visit(at + "post_attention_layernorm.weight", layer.post_attention_layernorm);
      visit(at + "mlp.gate_proj.weight", layer.gate_proj);
      visit(at + "mlp.up_proj.weight", layer.up_proj);
      visit(at + "mlp.down_proj.weight", layer.down_proj);
    }
    visit(std::string("norm.weight"), p.norm);
  }
};

// The frozen tensors shared with the target (SPEC §2).
template <class Real>
struct FrozenWeights {
  Tensor<Real> embed_tokens;  // E [V, H]
  Tensor<Real> lm_head;       // W_lm [V, H]
};

// All parameters of `config`, zero-filled, in `category` (parameters, or gradients).
template <class Real>
DrafterParameters<Real> make_drafter_parameters(MemoryTracker& tracker, const DrafterConfig& config,
                                                MemoryCategory category) {
  DrafterParameters<Real> p;
  p.layers.resize(static_cast<std::size_t>(config.num_hidden_layers));
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
  std::size_t index = 0;
  p.for_each([&](const std::string& name, Tensor<Real>& t) {
    const ParameterShape& s = shapes.at(index++);
    if (s.name != name) throw std::logic_error("drafter parameter order: " + s.name + " vs " + name);
    t = Tensor<Real>(tracker, category, s.shape);
  });
  return p;
}

// Deterministic values from a seed, each tensor from its own Philox stream (its index in module
// order): linear weights uniform in +-sqrt(3 / fan_in) (unit-variance outputs), norm weights
// 1 + norm_jitter * uniform(-1, 1) (SPEC: initialised to 1; tests perturb them so that their
// gradients are exercised non-trivially). Drawn in double, so every Real gets the same values.
template <class Real>
DrafterParameters<Real> init_drafter_parameters(MemoryTracker& tracker, const DrafterConfig& config, std::uint64_t seed,
                                                double norm_jitter = 0.0) {
  DrafterParameters<Real> p = make_drafter_parameters<Real>(tracker, config, MemoryCategory::parameters);
  std::uint32_t stream = 0;
  p.for_each([&](const std::string&, Tensor<Real>& t) {
    CounterRng rng(seed, ++stream);
    if (t.rank() == 1) {
      for (std::int64_t i = 0; i < t.numel(); ++i) t[i] = Real(1.0 + norm_jitter * rng.uniform(-1, 1));
    } else {
      const double bound = std::sqrt(3.0 / double(t.dim(1)));
      for (std::int64_t i = 0; i < t.numel(); ++i) t[i] = Real(bound * rng.uniform(-1, 1));
    }
  });
  return p;
}

// E uniform in [-1, 1); W_lm uniform in +-logit_scale sqrt(3/H) (logits of typical size
// logit_scale for unit-RMS hidden rows).
template <class Real>
FrozenWeights<Real> init_frozen_weights(MemoryTracker& tracker, const DrafterConfig& config, std::uint64_t seed,
                                        double logit_scale = 2.0) {
  const std::int64_t V = config.vocab_size, H = config.hidden_size;
  FrozenWeights<Real> f{Tensor<Real>(tracker, MemoryCategory::frozen, {V, H}),
                        Tensor<Real>(tracker, MemoryCategory::frozen, {V, H})};
  CounterRng embed_rng(seed, 0xE0), head_rng(seed, 0xE1);
  const double bound = logit_scale * std::sqrt(3.0 / double(H));
  for (std::int64_t i = 0; i < V * H; ++i) f.embed_tokens[i] = Real(embed_rng.uniform(-1, 1));
  for (std::int64_t i = 0; i < V * H; ++i) f.lm_head[i] = Real(bound * head_rng.uniform(-1, 1));
  return f;
}

// Shapes of every parameter against the config, and finiteness; messages name the parameter.
template <class Real>
void validate_drafter_parameters(const DrafterConfig& config, const DrafterParameters<Real>& params,
                                 const FrozenWeights<Real>& frozen) {
  if (static_cast<std::int64_t>(params.layers.size()) != config.num_hidden_layers) {
    throw_input_error("parameters",
                      str("have ", params.layers.size(), " layers for num_hidden_layers = ", config.num_hidden_layers));
  }
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
  std::size_t index = 0;
  auto check = [](const std::string& name, const Tensor<Real>& t, const Shape& want) {
    if (t.shape() != want) {
      throw_input_error(name,
                        str("shape ", shape_string(t.shape()), " does not match the config's ", shape_string(want)));
    }
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      if (!is_finite_value(t[i]))
        throw_input_error(name, str("element ", i, " is ", t[i], "; every value must be finite"));
    }
  };
  params.for_each([&](const std::string& name, const Tensor<Real>& t) { check(name, t, shapes.at(index++).shape); });
  check("embed_tokens.weight", frozen.embed_tokens, {config.vocab_size, config.hidden_size});
  check("lm_head.weight", frozen.lm_head, {config.vocab_size, config.hidden_size});
}

}  // namespace dflash
