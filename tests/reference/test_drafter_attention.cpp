// The trunk's attention contracts (SPEC §3, §6) checked through the whole drafter forward, each
// by a property that does not compare the implementation with itself:
// - RoPE phase: block row (n,k) sits at position a_n + k on the same axis as context row j, seen
//   through a score that can depend only on relative positions;
// - the GQA group map h -> h / (nh/nkv), seen by zeroing one KV head's weights;
// - the sliding window j >= a_n + k - (window - 1), neither one row wider nor one row narrower;
// - the exact set of site-1 dropout elements (h T + i)(S + T) + j, seen by the DropoutObserver.
#include <algorithm>
#include <filesystem>
#include <set>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "reference/drafter.hpp"
#include "reference/drafter_problem.hpp"
#include "tests/reference/tiny_config.hpp"

namespace dflash {
namespace {

// One layer of the given type, no dropout: block row (n,k)'s output Y depends only on the keys
// that row sees (the other rows reach it through no later layer).
DrafterConfig one_layer_config(LayerType type, std::int64_t window) {
  DrafterConfig c = load_drafter_config(tiny_config_path());
  c.num_hidden_layers = 1;
  c.layer_types = {type};
  c.sliding_window = window;
  c.attention_dropout = 0;
  c.hidden_dropout = 0;
  validate_drafter_config(c);
  return c;
}

std::vector<double> values(const Tensor<double>& t) { return {t.data(), t.data() + t.numel()}; }

struct Problem {
  MemoryTracker tracker;
  DrafterConfig config;
  DrafterParameters<double> params;
  FrozenWeights<double> frozen;
  DrafterBatch<double> batch;

  Problem(DrafterConfig c, DrafterBatchSpec spec)
      : config(std::move(c)),
        params(init_drafter_parameters<double>(tracker, config, 21, 0.2)),
        frozen(init_frozen_weights<double>(tracker, config, 22)),
        batch(make_drafter_batch<double>(tracker, config, spec)) {}

  // One sequence, explicit anchors.
  Problem(DrafterConfig c, std::int64_t S, const std::vector<std::int64_t>& anchors,
          const std::vector<std::uint8_t>& keep)
      : Problem(std::move(c), DrafterBatchSpec{.sequences = 1,
                                               .context_length = S,
                                               .seed = 23,
                                               .explicit_anchors = true,
                                               .anchor_slots = static_cast<std::int64_t>(anchors.size())}) {
    std::copy(anchors.begin(), anchors.end(), batch.anchors->data());
    std::copy(keep.begin(), keep.end(), batch.keep->data());
  }

  DrafterOutputs<double> forward(const DropoutObserver* observer = nullptr) {
    DrafterStepOptions options = drafter_step_options(config);
    options.dropout_observer = observer;
    return drafter_forward(tracker, config, params, frozen, batch, options);
  }
  // Y row i of sequence 0.
  std::vector<double> hidden_row(const DrafterOutputs<double>& out, std::int64_t i) const {
    const double* y = out.hidden.data() + i * config.hidden_size;
    return {y, y + config.hidden_size};
  }
  double* feature_row(std::int64_t j) { return batch.target_features.data() + j * config.feature_width(); }
};

// Two blocks, anchors a and a + 1 with x[a + 1] = mask_token_id, and a context row a that holds
// exactly block row (0,0)'s embedding (fc = [I 0], both norms the same weights). Then query
// (1,k) and query (0,k+1) both sit at position a + k + 1 and see the same contents at the same
// positions: context row a (position a) plays block row (0,0) (position a_0 + 0 = a), and block
// rows (1,k') play (0,k'+1). With RoPE a score depends only on the difference of positions, so
// the two rows' Y agree bitwise (same values in the same order). Rotating block rows at
// a_n + k + 1 (or any other offset against the context's j) breaks the agreement.
TEST(DrafterAttention, BlockRowsAreRotatedAtAnchorPlusKOnTheContextAxis) {
  const std::int64_t a = 5, S = 12;
  Problem p(one_layer_config(LayerType::sliding_attention, 6), S, {a, a + 1}, {1, 1});
  const std::int64_t H = p.config.hidden_size, B = p.config.block_size;
  ASSERT_GE(*p.config.sliding_window - 1, B - 1);  // query (1,k)'s window still reaches row a for every k
  std::fill(p.params.fc.data(), p.params.fc.data() + p.params.fc.numel(), 0.0);
  for (std::int64_t c = 0; c < H; ++c) p.params.fc.row(c)[c] = 1.0;
  std::copy(p.params.layers[0].input_layernorm.data(), p.params.layers[0].input_layernorm.data() + H,
            p.params.hidden_norm.data());
  p.batch.tokens[a + 1] = p.config.mask_token_id;
  const double* embedding = p.frozen.embed_tokens.row(p.batch.tokens[a]);
  std::copy(embedding, embedding + H, p.feature_row(a));

  const DrafterOutputs<double> out = p.forward();
  for (std::int64_t k = 0; k + 1 < B; ++k) {
    EXPECT_EQ(p.hidden_row(out, B + k), p.hidden_row(out, k + 1)) << "query (1," << k << ") vs (0," << k + 1 << ")";
  }
  // Not vacuous: rows at different positions differ.
  EXPECT_NE(p.hidden_row(out, B + 1), p.hidden_row(out, 1));
}

// Sliding layer, window W: query (n,k) sees context rows j in [a_n + k - (W - 1), a_n). Changing
// the target features of the first row outside the window leaves its Y bitwise unchanged;
// changing the first row inside changes it.
TEST(DrafterAttention, SlidingWindowIsNeitherWiderNorNarrower) {
  const std::int64_t a = 7, S = 12, window = 3;
  Problem p(one_layer_config(LayerType::sliding_attention, window), S, {a}, {1});
  const DrafterOutputs<double> base = p.forward();
  const std::int64_t KH = p.config.feature_width();
  for (std::int64_t k = 0; k < p.config.block_size; ++k) {
    const std::int64_t first_inside = a + k - (window - 1), last_outside = first_inside - 1;
    for (const std::int64_t j : {last_outside, first_inside}) {
      if (j >= a) continue;  // the window holds no context row at all
      double* f = p.feature_row(j);
      const std::vector<double> saved(f, f + KH);
      for (std::int64_t c = 0; c < KH; ++c) f[c] += 0.5;
      const DrafterOutputs<double> changed = p.forward();
      std::copy(saved.begin(), saved.end(), f);
      if (j == last_outside) {
        EXPECT_EQ(p.hidden_row(changed, k), p.hidden_row(base, k))
            << "k = " << k << ": context row " << j << " lies outside the window";
      } else {
        EXPECT_NE(p.hidden_row(changed, k), p.hidden_row(base, k))
            << "k = " << k << ": context row " << j << " lies inside the window";
      }
    }
  }
}

// Head h reads KV head h / (nh/nkv). Keep only the query heads of one group in o_proj: zeroing
// the other KV heads' k/v weights must leave Y bitwise unchanged, and zeroing the group's own KV
// head must not.
TEST(DrafterAttention, QueryHeadsReadTheirGroupsKvHead) {
  const DrafterConfig config = load_drafter_config(tiny_config_path());
  const std::int64_t nh = config.num_attention_heads, nkv = config.num_key_value_heads, d = config.head_dim;
  const std::int64_t group = nh / nkv;
  ASSERT_GE(nkv, 2);
  ASSERT_GE(group, 2);  // with one query head per KV head, h / group = h mod nkv
  for (std::int64_t g = 0; g < nkv; ++g) {
    Problem p(config, DrafterBatchSpec{.sequences = 1, .context_length = 12, .seed = 24});
    auto zero_kv_head = [&](std::int64_t kv) {
      for (DrafterLayerParameters<double>& layer : p.params.layers) {
        for (Tensor<double>* w : {&layer.k_proj, &layer.v_proj}) {
          std::fill(w->row(kv * d), w->row((kv + 1) * d), 0.0);
        }
      }
    };
    for (DrafterLayerParameters<double>& layer : p.params.layers) {
      for (std::int64_t r = 0; r < layer.o_proj.dim(0); ++r) {
        for (std::int64_t c = 0; c < nh * d; ++c) {
          if (c / d / group != g) layer.o_proj.row(r)[c] = 0.0;
        }
      }
    }
    const DrafterOutputs<double> base = p.forward();
    const DrafterParameters<double> kept = convert_parameters<double>(p.tracker, p.params);
    for (std::int64_t other = 0; other < nkv; ++other) {
      if (other != g) zero_kv_head(other);
    }
    EXPECT_EQ(values(p.forward().hidden), values(base.hidden)) << "group " << g << " read another group's KV head";
    p.params = convert_parameters<double>(p.tracker, kept);
    zero_kv_head(g);
    EXPECT_NE(values(p.forward().hidden), values(base.hidden)) << "group " << g << " does not read its own KV head";
  }
}

// Site 1 draws exactly the elements (h T + i)(S + T) + j for every head h, every query row i of
// a kept block and every key j that row sees (SPEC §3's mask, written out here), once each per
// forward, for every layer and sequence.
TEST(DrafterAttention, AttentionDropoutDrawsExactlyTheVisibleElements) {
  DrafterConfig config = load_drafter_config(tiny_config_path());
  config.attention_dropout = 0.3;
  Problem p(
      config,
      DrafterBatchSpec{
          .sequences = 2, .context_length = 13, .seed = 25, .explicit_anchors = true, .invalid_block_fraction = 0.3});
  using Draw = std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>;  // sequence, layer, element
  std::vector<Draw> drawn;
  const DropoutObserver observer = [&](const DropoutDraw& draw) {
    if (draw.site == DropoutSite::attention_probs) drawn.emplace_back(draw.sequence, draw.layer, draw.element);
  };
  p.forward(&observer);

  const std::int64_t S = 13, B = config.block_size, N = p.batch.anchors->dim(1), T = N * B;
  const std::int64_t window = *config.sliding_window;
  std::vector<Draw> expected;
  bool some_block_dropped = false;
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t l = 0; l < config.num_hidden_layers; ++l) {
      const bool sliding = config.layer_types[l] == LayerType::sliding_attention;
      for (std::int64_t h = 0; h < config.num_attention_heads; ++h) {
        for (std::int64_t n = 0; n < N; ++n) {
          if (p.batch.keep->row(b)[n] == 0) {
            some_block_dropped = true;
            continue;
          }
          const std::int64_t a = p.batch.anchors->row(b)[n];
          for (std::int64_t k = 0; k < B; ++k) {
            const std::int64_t i = n * B + k;
            auto add = [&](std::int64_t j) { expected.emplace_back(b, l, std::uint64_t((h * T + i) * (S + T) + j)); };
            for (std::int64_t j = 0; j < a; ++j) {
              if (!sliding || j >= a + k - (window - 1)) add(j);
            }
            for (std::int64_t kk = 0; kk < B; ++kk) {
              if (!sliding || kk <= k) add(S + n * B + kk);
            }
          }
        }
      }
    }
  }
  ASSERT_TRUE(some_block_dropped);  // kappa = 0 blocks draw nothing
  std::sort(drawn.begin(), drawn.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(std::adjacent_find(drawn.begin(), drawn.end()), drawn.end()) << "an element was drawn twice";
  EXPECT_EQ(drawn, expected);
}

}  // namespace
}  // namespace dflash
