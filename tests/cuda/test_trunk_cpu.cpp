// The trunk's orchestration (cuda/trunk.hpp over cuda/trunk_layer.hpp: the code the GPU runs)
// on the CPU backend (tests/cuda/host_backend.hpp) with fp32 storage, against the double
// reference trunk (reference/drafter_trunk.hpp) on the tiny and mid configs with dropout at
// every site: Y, dL/dF and every parameter gradient within the fp32 rule (2 x the error of the
// reference trunk run in float, + the fp32 floor), every policy bitwise the same, and the saved
// bytes each policy keeps exactly as cuda/trunk.hpp lists them.
#include <gtest/gtest.h>

#include <filesystem>
#include <ostream>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "cuda/trunk.hpp"
#include "reference/drafter.hpp"
#include "reference/drafter_problem.hpp"
#include "tests/cuda/attention_program_support.hpp"
#include "tests/cuda/host_backend.hpp"

namespace dflash {
namespace {

// max_anchors is cut (to 4 on mid: T = 64) to keep the CPU run to seconds; S = 300 lets the
// mid config's sliding window (256) bind.
struct TrunkCase {
  const char* config;
  std::int64_t context_length;
  std::int64_t max_anchors;
};
void PrintTo(const TrunkCase& c, std::ostream* os) { *os << c.config; }

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

  explicit TrunkProblem(const TrunkCase& c)
      : config(load_drafter_config(std::filesystem::path(DFLASH_SOURCE_DIR) / "configs" / c.config)) {
    config.attention_dropout = 0.1;
    config.hidden_dropout = 0.1;
    config.max_anchors = c.max_anchors;
    params = init_drafter_parameters<double>(tracker, config, 11, 0.2);
    frozen = init_frozen_weights<double>(tracker, config, 12);
    batch = make_drafter_batch<double>(tracker, config, {.sequences = 1, .context_length = c.context_length, .seed = 5});
    seq = prepare_sequences(config, batch, drafter_step_options(config)).front();
    dims = DrafterDims::of(config, c.context_length, batch.anchor_slots(config));
    CounterRng rng(77);
    d_hidden.resize(static_cast<std::size_t>(dims.T * dims.H));
    for (double& v : d_hidden) v = static_cast<double>(static_cast<float>(rng.uniform(-1.0, 1.0)));
    context_positions.resize(static_cast<std::size_t>(dims.S));
    for (std::int64_t j = 0; j < dims.S; ++j) context_positions[j] = j;
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
  const Tensor<Real> d_features =
      trunk.backward(Tensor<Real>(t, MemoryCategory::transient, {p.dims.T, p.dims.H},
                                  std::vector<Real>(p.d_hidden.begin(), p.d_hidden.end())),
                     grads);
  grads.for_each([&](const std::string&, const Tensor<Real>& g) { r.grads.push_back(g.values()); });
  r.features_grad = d_features.values();
  return r;
}

// The trunk on the CPU backend, fp32 storage, under `policy`; `saved_peak` gets the peak of
// saved bytes.
TrunkValues<float> twin_trunk(TrunkProblem& p, TrunkPolicy policy, std::int64_t every, std::size_t* saved_peak) {
  MemoryTracker tracker;
  const HostBackend<float> be{tracker};
  std::vector<std::vector<float>> values, grads;
  p.params.for_each([&](const std::string&, const Tensor<double>& t) {
    values.emplace_back(t.values().begin(), t.values().end());
    grads.emplace_back(t.values().size(), 0.0f);
  });
  const std::vector<float> embed(p.frozen.embed_tokens.values().begin(), p.frozen.embed_tokens.values().end());
  TrunkWeights<float> w;
  TrunkGrads g;
  std::size_t at = 0;
  auto next = [&] {
    const std::size_t i = at++;
    return std::pair<const float*, float*>{values[i].data(), grads[i].data()};
  };
  w.embed_tokens = embed.data();
  std::tie(w.fc, g.fc) = next();
  std::tie(w.hidden_norm, g.hidden_norm) = next();
  for (std::int64_t l = 0; l < p.dims.L; ++l) {
    LayerWeights<float> lw{};
    LayerGrads lg{};
    std::tie(lw.input_layernorm, lg.input_layernorm) = next();
    std::tie(lw.q_proj, lg.q_proj) = next();
    std::tie(lw.k_proj, lg.k_proj) = next();
    std::tie(lw.v_proj, lg.v_proj) = next();
    std::tie(lw.o_proj, lg.o_proj) = next();
    std::tie(lw.q_norm, lg.q_norm) = next();
    std::tie(lw.k_norm, lg.k_norm) = next();
    std::tie(lw.post_attention_layernorm, lg.post_attention_layernorm) = next();
    std::tie(lw.gate_proj, lg.gate_proj) = next();
    std::tie(lw.up_proj, lg.up_proj) = next();
    std::tie(lw.down_proj, lg.down_proj) = next();
    w.layers.push_back(lw);
    g.layers.push_back(lg);
    w.sliding.push_back(p.config.layer_types[static_cast<std::size_t>(l)] == LayerType::sliding_attention);
  }
  std::tie(w.norm, g.norm) = next();
  std::vector<float> features_grad(p.batch.target_features.values().size(), 0.0f);
  g.target_features = features_grad.data();
  const std::vector<float> features(p.batch.target_features.values().begin(), p.batch.target_features.values().end());

  TrunkLayerContext<float> ctx;
  ctx.dims = p.dims;
  ctx.eps = static_cast<float>(p.config.rms_norm_eps);
  ctx.rope_theta = p.config.rope_theta;
  ctx.sliding_window = p.config.sliding_window.value_or(0);
  ctx.key_tile = 8;  // several context tiles even at the tiny config's S
  ctx.anchors = p.seq.slots.anchors.data();
  ctx.keep = p.seq.slots.keep.data();
  ctx.block_positions = p.seq.blocks.positions.data();
  ctx.context_positions = p.context_positions.data();
  ctx.seed = p.config.seed;
  ctx.attention_dropout = p.config.attention_dropout;
  ctx.hidden_dropout = p.config.hidden_dropout;

  Trunk<HostBackend<float>> trunk(be, w, ctx, p.dims.K, features.data(), p.seq.blocks.input_tokens.data(), policy,
                                  every);
  HostBuffer<float> y = trunk.forward();
  TrunkValues<float> r;
  r.hidden.assign(y.data(), y.data() + y.size());
  HostBuffer<float> d_hidden = be.buffer<float>(MemoryCategory::transient, p.d_hidden.size());
  for (std::size_t e = 0; e < p.d_hidden.size(); ++e) d_hidden.data()[e] = static_cast<float>(p.d_hidden[e]);
  trunk.backward(std::move(d_hidden), g);
  r.grads = grads;
  r.features_grad = features_grad;
  *saved_peak = tracker.peak(MemoryCategory::saved);
  EXPECT_EQ(tracker.current(MemoryCategory::saved), 0u) << "backward frees what forward kept";
  return r;
}

class TrunkTwin : public ::testing::TestWithParam<TrunkCase> {};
INSTANTIATE_TEST_SUITE_P(Configs, TrunkTwin, ::testing::Values(TrunkCase{"tiny.json", 11, 4}, TrunkCase{"mid.json", 300, 4}),
                         [](const auto& info) { return std::string(info.param.config).substr(0, 3); });

TEST_P(TrunkTwin, WithinFp32RuleOfDoubleReference) {
  TrunkProblem p(GetParam());
  const TrunkValues<double> exact = reference_trunk<double>(p);
  const TrunkValues<float> plain = reference_trunk<float>(p);
  std::size_t peak = 0;
  const TrunkValues<float> got = twin_trunk(p, TrunkPolicy::per_layer, 1, &peak);
  expect_within_rule("hidden", got.hidden, plain.hidden, exact.hidden, kAttentionFp32Floor);
  std::size_t at = 0;
  p.params.for_each([&](const std::string& name, const Tensor<double>&) {
    SCOPED_TRACE(name);
    expect_within_rule(name.c_str(), got.grads[at], plain.grads[at], exact.grads[at], kAttentionFp32Floor);
    ++at;
  });
  expect_within_rule("dL/dF", got.features_grad, plain.features_grad, exact.features_grad, kAttentionFp32Floor);
}

TEST_P(TrunkTwin, PoliciesBitwiseEqualWithTheDocumentedSavedBytes) {
  TrunkProblem p(GetParam());
  const DrafterDims& m = p.dims;
  const std::size_t context = m.S * m.H * 4 * 2 + m.S * 4, input = m.T * m.H * 4, final = m.T * m.H * 4 + m.T * 4,
                    acts = TrunkLayerActivations<HostBackend<float>>::bytes(m);
  const auto L = static_cast<std::size_t>(m.L);
  std::size_t none_peak = 0, per_layer_peak = 0, every2_peak = 0;
  const TrunkValues<float> none = twin_trunk(p, TrunkPolicy::none, 1, &none_peak);
  const TrunkValues<float> per_layer = twin_trunk(p, TrunkPolicy::per_layer, 1, &per_layer_peak);
  const TrunkValues<float> every2 = twin_trunk(p, TrunkPolicy::every_k, 2, &every2_peak);
  EXPECT_EQ(none_peak, context + L * input + L * acts + final);
  EXPECT_EQ(per_layer_peak, context + L * input + acts);
  // every 2: boundaries 0, 2, ...; the peak is while the last full segment [s, s + 2) is
  // recomputed: the boundaries 0, 2, ..., s, its inner input s + 1, and 2 layers' activations.
  ASSERT_GE(L, 2u);
  const std::size_t last_full = (L - 2) / 2 * 2;
  EXPECT_EQ(every2_peak, context + (last_full / 2 + 2) * input + 2 * acts);
  for (const TrunkValues<float>* other : {&per_layer, &every2}) {
    ASSERT_EQ(other->hidden, none.hidden);
    ASSERT_EQ(other->grads, none.grads);
    ASSERT_EQ(other->features_grad, none.features_grad);
  }
}

}  // namespace
}  // namespace dflash
