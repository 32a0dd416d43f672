// The drafter step's contract: bad inputs are rejected naming the tensor and the element, and the
// step is deterministic, sequence-additive, W-normalised and blind to what it must not read.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/tolerances.hpp"
#include "reference/compare.hpp"
#include "reference/drafter.hpp"
#include "reference/drafter_compare.hpp"
#include "reference/drafter_problem.hpp"
#include "tests/reference/tiny_config.hpp"

namespace dflash {
namespace {

using ::testing::HasSubstr;

struct TinyProblem {
  MemoryTracker tracker;
  DrafterConfig config = load_drafter_config(tiny_config_path());
  DrafterParameters<double> params = init_drafter_parameters<double>(tracker, config, 11, 0.2);
  FrozenWeights<double> frozen = init_frozen_weights<double>(tracker, config, 12);
  DrafterBatch<double> batch;
  DrafterStepOptions options = drafter_step_options(config);

  explicit TinyProblem(DrafterBatchSpec spec = {.sequences = 2, .context_length = 11, .seed = 5}) {
    batch = make_drafter_batch<double>(tracker, config, spec);
  }
  DrafterStepResult<double> step() { return drafter_step(tracker, config, params, frozen, batch, options); }
  std::string error() {
    try {
      step();
    } catch (const InputError& e) {
      return e.what();
    }
    return "(accepted)";
  }
};

TEST(DrafterStepRejects, TokenIdAtLeastVocab) {
  TinyProblem p;
  p.batch.tokens[1 * 11 + 4] = p.config.vocab_size;
  EXPECT_THAT(p.error(), HasSubstr("invalid tokens[1][4]: 64 is outside [0, vocab_size = 64)"));
}

TEST(DrafterStepRejects, NegativeTokenId) {
  TinyProblem p;
  p.batch.tokens[3] = -1;
  EXPECT_THAT(p.error(), HasSubstr("invalid tokens[0][3]: -1 is outside"));
}

TEST(DrafterStepRejects, UnsortedAnchors) {
  TinyProblem p({.sequences = 2, .context_length = 11, .seed = 5, .explicit_anchors = true});
  for (std::int64_t n = 0; n < 4; ++n) {
    p.batch.anchors->row(1)[n] = 8 - 2 * n;
    p.batch.keep->row(1)[n] = 1;
  }
  EXPECT_THAT(p.error(),
              HasSubstr("invalid anchors of sequence 1, anchor[1]: 6 is not greater than the previous kept anchor 8"));
}

TEST(DrafterStepRejects, AnchorOutOfRange) {
  TinyProblem p({.sequences = 2, .context_length = 11, .seed = 5, .explicit_anchors = true});
  for (std::int64_t n = 0; n < 4; ++n) {
    p.batch.anchors->row(0)[n] = 2 * n;
    p.batch.keep->row(0)[n] = 1;
  }
  p.batch.anchors->row(0)[3] = 11;
  EXPECT_THAT(p.error(), HasSubstr("invalid anchors of sequence 0, anchor[3]: 11 is outside [0, S = 11)"));
}

TEST(DrafterStepRejects, AnchorsWithoutKeep) {
  TinyProblem p({.sequences = 2, .context_length = 11, .seed = 5, .explicit_anchors = true});
  p.batch.keep.reset();
  EXPECT_THAT(p.error(), HasSubstr("invalid keep: explicit anchors need both anchors and keep"));
}

TEST(DrafterStepRejects, FeatureWidthNotKTimesH) {
  TinyProblem p;
  p.batch.target_features = Tensor<double>(p.tracker, MemoryCategory::inputs, {2, 11, 3 * 16});
  EXPECT_THAT(p.error(), HasSubstr("invalid target_features: width 48 is not K H = 2 x 16 = 32"));
}

TEST(DrafterStepRejects, FeatureRowsNotS) {
  TinyProblem p;
  p.batch.target_features = Tensor<double>(p.tracker, MemoryCategory::inputs, {2, 10, 32});
  EXPECT_THAT(p.error(), HasSubstr("invalid target_features: shape [2, 10, 32] is not [nseq, S, K H] = [2, 11, 32]"));
}

TEST(DrafterStepRejects, TeacherShape) {
  TinyProblem p;
  p.batch.teacher_hidden = Tensor<double>(p.tracker, MemoryCategory::inputs, {2, 11, 15});
  EXPECT_THAT(p.error(), HasSubstr("invalid teacher_hidden: shape [2, 11, 15]"));
}

TEST(DrafterStepRejects, LossMaskValue) {
  TinyProblem p;
  p.batch.loss_mask[11 + 2] = 2;
  EXPECT_THAT(p.error(), HasSubstr("invalid loss_mask[1][2]: 2 is not 0 or 1"));
}

TEST(DrafterStepRejects, NonFiniteFeature) {
  TinyProblem p;
  p.batch.target_features[(1 * 11 + 7) * 32 + 5] = std::numeric_limits<double>::infinity();
  EXPECT_THAT(p.error(), HasSubstr("invalid target_features[1][7]: element 5 is inf"));
}

TEST(DrafterStepRejects, NonFiniteTeacherRowThatCarriesALabel) {
  TinyProblem p;
  const DrafterStepResult<double> r = p.step();
  // Block row 1 of the first kept block has label x[a + 1] and teacher row G[a].
  std::int64_t a = -1;
  for (std::int64_t n = 0; n < r.outputs.anchors.dim(1) && a < 0; ++n) {
    if (r.outputs.keep.row(0)[n] && r.outputs.weights.row(0)[n * p.config.block_size + 1] > 0)
      a = r.outputs.anchors.row(0)[n];
  }
  ASSERT_GE(a, 0);
  p.batch.teacher_hidden[a * 16 + 3] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(p.error(), HasSubstr(str("invalid teacher_hidden[0][", a, "]: element 3 is nan")));
}

// The check reads each row of G once per sequence (validate_teacher_rows_of): a row that sequence 0
// uses too is still checked in sequence 1.
TEST(DrafterStepRejects, NonFiniteTeacherRowOfTheSecondSequenceThatTheFirstUsesToo) {
  TinyProblem p;
  const DrafterStepResult<double> r = p.step();
  const auto rows_used = [&](std::int64_t b) {
    std::vector<std::int64_t> rows;
    for (std::int64_t n = 0; n < r.outputs.anchors.dim(1); ++n) {
      if (!r.outputs.keep.row(b)[n]) continue;
      for (std::int64_t k = 1; k < p.config.block_size; ++k) {
        if (r.outputs.weights.row(b)[n * p.config.block_size + k] > 0)
          rows.push_back(r.outputs.anchors.row(b)[n] + k - 1);
      }
    }
    return rows;
  };
  const std::vector<std::int64_t> first = rows_used(0), second = rows_used(1);
  std::int64_t shared = -1;
  for (const std::int64_t row : second) {
    if (std::find(first.begin(), first.end(), row) != first.end()) shared = row;
  }
  ASSERT_GE(shared, 0) << "the tiny problem's two sequences share no teacher row";
  const std::int64_t S = p.batch.context_length();
  p.batch.teacher_hidden[(1 * S + shared) * 16 + 2] = std::numeric_limits<double>::infinity();
  EXPECT_THAT(p.error(), HasSubstr(str("invalid teacher_hidden[1][", shared, "]: element 2 is inf")));
}

TEST(DrafterStepRejects, ParameterShape) {
  TinyProblem p;
  p.params.layers[1].k_proj = Tensor<double>(p.tracker, MemoryCategory::parameters, {8, 15});
  EXPECT_THAT(p.error(),
              HasSubstr("invalid layers.1.self_attn.k_proj.weight: shape [8, 15] does not match the config's [8, 16]"));
}

TEST(DrafterStepRejects, SequenceOffsetBeyondTheStreamLayout) {
  TinyProblem p;
  p.options.sequence_offset = kMaxSequenceIndex - 1;
  EXPECT_THAT(p.error(), HasSubstr("invalid sequence_offset: 1048575 + nseq = 2 exceeds 2^20"));
}

TEST(DrafterStepRejects, CheckpointEveryZero) {
  TinyProblem p;
  p.options.trunk_policy = TrunkPolicy::every_k;
  p.options.checkpoint_every = 0;
  EXPECT_THAT(p.error(), HasSubstr("invalid checkpoint_every: 0 must be at least 1"));
}

TEST(DrafterStep, DeterministicBitwise) {
  TinyProblem p;
  p.config.attention_dropout = 0.2;
  p.config.hidden_dropout = 0.1;
  EXPECT_TRUE(drafter_steps_identical(p.step(), p.step()));
}

TEST(DrafterStep, ExplicitAnchorsEqualToTheSampledOnesGiveTheSameStep) {
  TinyProblem p;
  const DrafterStepResult<double> sampled = p.step();
  p.batch.anchors.emplace(copy_tensor(p.tracker, sampled.outputs.anchors));
  p.batch.keep.emplace(copy_tensor(p.tracker, sampled.outputs.keep));
  EXPECT_TRUE(drafter_steps_identical(p.step(), sampled));
}

// The per-row outputs behind the block statistics: w01 as prepare_sequences makes it, and hits only
// on labelled rows, as many as the loss head's correct count (they are its own argmax flags).
TEST(DrafterStep, HitsAreTheLossHeadsCorrectRows) {
  TinyProblem p({.sequences = 3, .context_length = 14, .seed = 8});
  const DrafterOutputs<double> out = p.step().outputs;
  const std::vector<PreparedSequence<double>> seqs = prepare_sequences(p.config, p.batch, p.options);
  const std::size_t T = std::size_t(out.weights.dim(1));
  ASSERT_EQ(out.labelled.size(), seqs.size() * T);
  ASSERT_EQ(out.hits.size(), seqs.size() * T);
  std::int64_t hits = 0, labelled = 0;
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    for (std::size_t i = 0; i < T; ++i) {
      ASSERT_EQ(out.labelled[b * T + i], seqs[b].blocks.valid[i]) << "sequence " << b << " row " << i;
      if (out.labelled[b * T + i] == 0) {
        EXPECT_EQ(out.hits[b * T + i], 0) << "sequence " << b << " row " << i;
      }
      hits += out.hits[b * T + i];
      labelled += out.labelled[b * T + i];
    }
  }
  EXPECT_EQ(hits, out.stats.correct);
  EXPECT_EQ(labelled, out.stats.valid_rows);
  EXPECT_GT(labelled, 0);
}

// W = 0 (no row carries a weight): loss and every gradient exactly 0 (SPEC §5).
TEST(DrafterStep, ZeroWeightSumGivesZeroLossAndGradients) {
  TinyProblem p({.sequences = 1, .context_length = 11, .seed = 5, .mask_hole_fraction = 1.0});
  const DrafterStepResult<double> r = p.step();
  EXPECT_EQ(r.outputs.weight_sum, 0.0);
  EXPECT_EQ(r.outputs.stats.loss, 0.0);
  EXPECT_EQ(r.outputs.stats.accuracy(), 0.0);
  r.grads.for_each([](const std::string& name, const Tensor<double>& g) {
    for (double v : g.values()) ASSERT_EQ(v, 0.0) << name;
  });
  for (double v : r.target_features_grad.values()) ASSERT_EQ(v, 0.0);
}

// A batch's step is the sum of its sequences' steps under the batch's global W (SPEC §5): the
// second sequence, run alone with its global index and the batch's W, gives its share.
TEST(DrafterStep, SequencesAddUpUnderTheGlobalWeightSum) {
  TinyProblem p;
  p.config.attention_dropout = 0.3;
  const DrafterStepResult<double> both = p.step();
  const double W = both.outputs.weight_sum;
  double loss = 0;
  std::vector<std::vector<double>> grads;
  for (std::int64_t b = 0; b < 2; ++b) {
    MemoryTracker t;
    DrafterBatch<double> one{
        Tensor<std::int64_t>(t, MemoryCategory::inputs, {1, 11},
                             std::vector<std::int64_t>(p.batch.tokens.row(b), p.batch.tokens.row(b) + 11)),
        Tensor<std::uint8_t>(t, MemoryCategory::inputs, {1, 11},
                             std::vector<std::uint8_t>(p.batch.loss_mask.row(b), p.batch.loss_mask.row(b) + 11)),
        Tensor<double>(t, MemoryCategory::inputs, {1, 11, 32},
                       std::vector<double>(p.batch.target_features.row(b), p.batch.target_features.row(b) + 11 * 32)),
        Tensor<double>(t, MemoryCategory::inputs, {1, 11, 16},
                       std::vector<double>(p.batch.teacher_hidden.row(b), p.batch.teacher_hidden.row(b) + 11 * 16)),
        std::nullopt,
        std::nullopt};
    DrafterStepOptions o = p.options;
    o.sequence_offset = static_cast<std::uint32_t>(b);
    const DrafterStepResult<double> r = drafter_step(t, p.config, p.params, p.frozen, one, o, std::optional<double>(W));
    loss += r.outputs.stats.loss;
    std::size_t i = 0;
    r.grads.for_each([&](const std::string&, const Tensor<double>& g) {
      if (grads.size() <= i) grads.emplace_back(g.numel(), 0.0);
      for (std::int64_t e = 0; e < g.numel(); ++e) grads[i][e] += g[e];
      ++i;
    });
    EXPECT_EQ(relative_error(std::span<const double>(r.target_features_grad.data(), 11 * 32),
                             std::span<const double>(both.target_features_grad.row(b), 11 * 32)),
              0.0);
  }
  // Sums in a different order: SPEC §10's reference bound.
  EXPECT_LE(scalar_relative_error(loss, both.outputs.stats.loss), kReferenceTolerance);
  std::size_t i = 0;
  both.grads.for_each([&](const std::string& name, const Tensor<double>& g) {
    EXPECT_LE(relative_error(std::span<const double>(grads[i]), std::span<const double>(g.data(), g.values().size())),
              kReferenceTolerance)
        << name;
    ++i;
  });
}

// Rows with w01 = 0 carry no teacher: NaN there changes nothing (SPEC §4).
TEST(DrafterStep, UnusedTeacherRowsAreNeverRead) {
  TinyProblem p;
  const DrafterStepResult<double> clean = p.step();
  poison_unused_teacher_rows(p.batch, clean.outputs.anchors, clean.outputs.keep, p.config);
  EXPECT_TRUE(drafter_steps_identical(p.step(), clean));
}

TEST(DrafterStep, GradientsAreNamedLikeHuggingFace) {
  TinyProblem p;
  const DrafterStepResult<double> r = p.step();
  std::vector<std::string> names;
  r.grads.for_each([&](const std::string& name, const Tensor<double>& g) {
    names.push_back(name);
    EXPECT_EQ(g.category(), MemoryCategory::gradients);
  });
  std::vector<std::string> expected;
  for (const ParameterShape& s : drafter_parameter_shapes(p.config)) expected.push_back(s.name);
  EXPECT_EQ(names, expected);
  EXPECT_EQ(names.front(), "fc.weight");
  EXPECT_EQ(names[2], "layers.0.input_layernorm.weight");
  EXPECT_EQ(names[7], "layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(names.back(), "norm.weight");
}

}  // namespace
}  // namespace dflash

namespace dflash {
namespace {

// GradientsFinal (the hook a training step reduces buckets from): for each sequence, told with
// norm.weight's position, then layer L-1's, ..., layer 0's, then 0, each time the gradients from
// that position on already hold the sequence's final sums, and never late: fc.weight (finished
// last) still changes until the last call.
TEST(DrafterStep, GradientsFinalIsToldAsSoonAsEachLayerIsFinished) {
  TinyProblem p;
  p.config.hidden_dropout = 0.1;
  const std::int64_t L = p.config.num_hidden_layers;
  struct Call {
    std::uint32_t sequence;
    std::size_t first;
    std::vector<std::vector<double>> grads;  // every tensor at the time of the call
  };
  std::vector<Call> calls;
  DrafterParameters<double> grads = make_drafter_parameters<double>(p.tracker, p.config, MemoryCategory::gradients);
  auto snapshot = [&] {
    std::vector<std::vector<double>> values;
    grads.for_each([&](const std::string&, const Tensor<double>& t) { values.push_back(t.values()); });
    return values;
  };
  const GradientsFinalObserver observer = [&](std::uint32_t sequence, std::size_t first) {
    calls.push_back({sequence, first, snapshot()});
  };
  p.options.sequence_offset = 4;
  p.options.gradients_final = &observer;
  drafter_step_accumulate(p.tracker, p.config, p.params, p.frozen, p.batch, p.options, std::optional<double>(), grads);

  std::vector<std::size_t> want_firsts;
  for (std::int64_t l = L; l >= 0; --l) want_firsts.push_back(first_layer_parameter(l));
  want_firsts.push_back(0);
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(p.config);
  EXPECT_EQ(shapes.at(first_layer_parameter(L)).name, "norm.weight");
  EXPECT_EQ(shapes.at(first_layer_parameter(L - 1)).name, str("layers.", L - 1, ".input_layernorm.weight"));
  ASSERT_EQ(calls.size(), 2 * want_firsts.size());
  for (std::size_t b = 0; b < 2; ++b) {
    const std::vector<std::vector<double>>& end = calls[(b + 1) * want_firsts.size() - 1].grads;  // after sequence b
    for (std::size_t c = 0; c < want_firsts.size(); ++c) {
      const Call& call = calls[b * want_firsts.size() + c];
      EXPECT_EQ(call.sequence, 4 + b);
      ASSERT_EQ(call.first, want_firsts[c]) << "call " << c << " of sequence " << b;
      for (std::size_t t = call.first; t < shapes.size(); ++t) {
        EXPECT_EQ(call.grads[t], end[t]) << shapes[t].name << " not final when told, sequence " << b;
      }
      if (call.first > 0) {
        EXPECT_NE(call.grads[0], end[0]) << "fc.weight already final: told late, call " << c;
      }
    }
  }
}

}  // namespace
}  // namespace dflash
