// The trunk on a backend (cuda/trunk/stack.hpp) and the reference trunk on one sequence of a
// reference problem, for the CPU twin test (tests/cuda/trunk/test_trunk_cpu.cpp) and the GPU test
// (tests/cuda/trunk/test_trunk_gpu.cpp): the problem, the reference in any Real, and the trunk run on
// any backend under any policy, results brought back to the host.
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/storage.hpp"
#include "cuda/trunk/stack.hpp"
#include "harness/cuda/config_path.hpp"
#include "harness/cuda/device_formats.hpp"
#include "reference/drafter.hpp"
#include "reference/drafter_problem.hpp"
#include "tests/cuda/attention/simt_support.hpp"

namespace dflash {

// max_anchors is cut (to 4 on mid: T = 64) and mid's layers to 4 to keep the CPU run to seconds;
// S = 300 lets the mid config's sliding window (256) bind.
struct TrunkCase {
  const char* config;
  std::int64_t context_length;
  std::int64_t max_anchors;
  std::int64_t intermediate_size = 0;  // 0: the config's (a narrow MLP lets other phases bind the peak)
};
inline void PrintTo(const TrunkCase& c, std::ostream* os) { *os << c.config; }

// One sequence of a reference problem: config (dropout on), parameters, frozen weights, the
// sequence's anchors and block rows as the step prepares them, and a fixed dL/dY.
struct TrunkProblem {
  MemoryTracker tracker;
  DrafterConfig config;
  DrafterParameters<double> params;
  FrozenWeights<double> frozen;
  DrafterBatch<double> batch;
  PreparedSequence<double> seq;
  DrafterDims dims;
  std::vector<double> d_hidden;
  std::vector<std::int64_t> context_positions;

  explicit TrunkProblem(const TrunkCase& c) : config(load_drafter_config(test_config_file(c.config))) {
    config.attention_dropout = 0.1;
    config.hidden_dropout = 0.1;
    config.max_anchors = c.max_anchors;
    if (c.intermediate_size > 0) config.intermediate_size = c.intermediate_size;
    if (config.num_hidden_layers > 4) {  // mid: 4 layers (3 sliding, full), two full segments of every 2
      config.num_hidden_layers = 4;
      config.layer_types = {LayerType::sliding_attention, LayerType::sliding_attention, LayerType::sliding_attention,
                            LayerType::full_attention};
    }
    params = init_drafter_parameters<double>(tracker, config, 11, 0.2);
    frozen = init_frozen_weights<double>(tracker, config, 12);
    batch =
        make_drafter_batch<double>(tracker, config, {.sequences = 1, .context_length = c.context_length, .seed = 5});
    seq = prepare_sequences(config, batch, drafter_step_options(config)).front();
    dims = DrafterDims::of(config, c.context_length, batch.anchor_slots(config));
    CounterRng rng(77);
    d_hidden.resize(static_cast<std::size_t>(dims.T * dims.H));
    for (double& v : d_hidden) v = static_cast<double>(static_cast<float>(rng.uniform(-1.0, 1.0)));
    context_positions.resize(static_cast<std::size_t>(dims.S));
    for (std::int64_t j = 0; j < dims.S; ++j) context_positions[j] = j;
  }

  // Every weight matrix, E and F rounded to bf16, norm weights to float: the values the GPU sees,
  // so that the reference computes exactly on the device's inputs.
  void round_to_device_formats() {
    round_parameters_to_device_formats(params);
    round_to_bf16_in_place(frozen.embed_tokens);
    round_to_bf16_in_place(batch.target_features);
  }
};

// Y, then every gradient in DrafterParameters order, then dL/dF.
template <class Real>
struct TrunkValues {
  std::vector<Real> hidden;
  std::vector<std::vector<Real>> grads;  // per parameter
  std::vector<Real> features_grad;
};

template <class Real>
TrunkValues<Real> reference_trunk(TrunkProblem& p) {
  MemoryTracker& t = p.tracker;
  const DrafterParameters<Real> params = convert_parameters<Real>(t, p.params);
  const FrozenWeights<Real> frozen = convert_frozen<Real>(t, p.frozen);
  const std::vector<Real> features(p.batch.target_features.values().begin(), p.batch.target_features.values().end());
  const TrunkInputs<Real> in{p.dims,
                             features.data(),
                             p.seq.slots.anchors,
                             p.seq.slots.keep,
                             p.seq.blocks.input_tokens,
                             p.seq.blocks.positions,
                             DropoutCoordinates{p.config.seed, 0, 0, DropoutPass::forward, nullptr}};
  SequenceTrunk<Real> trunk(t, p.config, params, frozen, in, TrunkPolicy::none, 1);
  Tensor<Real> y = trunk.forward(true);
  TrunkValues<Real> r;
  r.hidden = y.values();
  DrafterParameters<Real> grads = make_drafter_parameters<Real>(t, p.config, MemoryCategory::gradients);
  const Tensor<Real> d_features = trunk.backward(Tensor<Real>(t, MemoryCategory::transient, {p.dims.T, p.dims.H},
                                                              std::vector<Real>(p.d_hidden.begin(), p.d_hidden.end())),
                                                 grads);
  grads.for_each([&](const std::string&, const Tensor<Real>& g) { r.grads.push_back(g.values()); });
  r.features_grad = d_features.values();
  return r;
}

// What the backward had announced final at one GradientsFinal call: the position, and every
// gradient (DrafterParameters order) as it stood then.
struct TrunkAnnouncement {
  std::size_t first = 0;
  std::vector<std::vector<float>> grads;
};

// The trunk on `be` under `policy`: Y (widened to float), every gradient and dL/dF. The
// backend provides from_host / to_host besides what cuda/trunk/layer.hpp lists. `announcements`,
// when given, receives each GradientsFinal call of the backward. Every gradient buffer (and dL/dF's)
// starts at `gradient_start` in every element: 0 as a step's first sequence finds them.
template <class Backend>
TrunkValues<float> run_trunk(const Backend& be, const TrunkProblem& p, TrunkPolicy policy, std::int64_t every,
                             std::vector<TrunkAnnouncement>* announcements = nullptr, float gradient_start = 0.0f) {
  using Storage = typename Backend::Storage;
  auto narrowed = [](const std::vector<double>& x) {
    std::vector<Storage> out(x.size());
    for (std::size_t e = 0; e < x.size(); ++e) narrow_into(static_cast<float>(x[e]), out[e]);
    return out;
  };
  const MemoryCategory params = MemoryCategory::parameters, in = MemoryCategory::inputs;
  std::vector<typename Backend::template Buffer<Storage>> matrices;
  std::vector<typename Backend::template Buffer<float>> vectors, grads;
  std::vector<const void*> values;
  p.params.for_each([&](const std::string&, const Tensor<double>& t) {
    if (t.rank() == 2) {
      matrices.push_back(be.from_host(params, narrowed(t.values())));
      values.push_back(matrices.back().data());
    } else {
      vectors.push_back(be.from_host(params, std::vector<float>(t.values().begin(), t.values().end())));
      values.push_back(vectors.back().data());
    }
    grads.push_back(be.from_host(MemoryCategory::gradients, std::vector<float>(t.values().size(), gradient_start)));
  });
  const auto embed = be.from_host(params, narrowed(p.frozen.embed_tokens.values()));
  const auto features = be.from_host(in, narrowed(p.batch.target_features.values()));
  auto features_grad = be.from_host(MemoryCategory::gradients,
                                    std::vector<float>(p.batch.target_features.values().size(), gradient_start));
  const auto anchors = be.from_host(in, p.seq.slots.anchors);
  const auto keep = be.from_host(in, p.seq.slots.keep);
  const auto positions = be.from_host(in, p.seq.blocks.positions);
  const auto tokens = be.from_host(in, p.seq.blocks.input_tokens);
  const auto context_positions = be.from_host(in, p.context_positions);

  std::vector<float*> grad_of;
  for (auto& grad : grads) grad_of.push_back(grad.data());
  TrunkWeights<Storage> w;
  TrunkGrads g;
  bind_trunk_parameters(p.config, values, grad_of, embed.data(), w, g);
  g.target_features = features_grad.data();

  TrunkLayerContext<Storage> ctx;
  ctx.dims = p.dims;
  ctx.eps = static_cast<float>(p.config.rms_norm_eps);
  ctx.rope_theta = p.config.rope_theta;
  ctx.sliding_window = p.config.sliding_window.value_or(0);
  ctx.key_tile = 8;  // several context tiles even at the tiny config's S
  ctx.anchors = anchors.data();
  ctx.keep = keep.data();
  ctx.block_positions = positions.data();
  ctx.context_positions = context_positions.data();
  ctx.seed = p.config.seed;
  ctx.attention_dropout = p.config.attention_dropout;
  ctx.hidden_dropout = p.config.hidden_dropout;

  Trunk<Backend> trunk(be, w, ctx, p.dims.K, features.data(), tokens.data(), policy, every);
  TrunkValues<float> r;
  for (const Storage& y : be.to_host(trunk.forward())) r.hidden.push_back(widen(y));
  // dL/dY arrives as the step's loss head hands it back: a gradient (cuda/loss_head/chunked_head.hpp), so
  // that the transient bytes are the trunk's own (planner/cuda_trunk_memory.hpp).
  GradientsFinal on_final;
  if (announcements != nullptr) {
    on_final = [&](std::size_t first) {
      TrunkAnnouncement& a = announcements->emplace_back();
      a.first = first;
      for (const auto& grad : grads) a.grads.push_back(be.to_host(grad));
    };
  }
  trunk.backward(be.from_host(MemoryCategory::gradients, std::vector<float>(p.d_hidden.begin(), p.d_hidden.end())), g,
                 on_final);
  for (const auto& grad : grads) r.grads.push_back(be.to_host(grad));
  r.features_grad = be.to_host(features_grad);
  return r;
}

// Y, every gradient and dL/dF of `got` within SPEC §10's rule against `exact`, `plain` being the
// plain low-precision computation.
inline void expect_trunk_within_rule(const TrunkProblem& p, const TrunkValues<float>& got,
                                     const TrunkValues<float>& plain, const TrunkValues<double>& exact, double floor) {
  expect_within_rule("hidden", got.hidden, plain.hidden, exact.hidden, floor);
  std::size_t at = 0;
  p.params.for_each([&](const std::string& name, const Tensor<double>&) {
    expect_within_rule(name.c_str(), got.grads[at], plain.grads[at], exact.grads[at], floor);
    ++at;
  });
  expect_within_rule("dL/dF", got.features_grad, plain.features_grad, exact.features_grad, floor);
}

}  // namespace dflash
