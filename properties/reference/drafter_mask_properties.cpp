// Mask semantics (SPEC §3): a block never sees the target features at its anchor or later, blocks
// never see each other, and a sliding layer never sees context outside its window. What a block
// must not see leaves its outputs (Y rows, lse, token losses) bitwise unchanged.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/reference/drafter_cases.hpp"

namespace dflash {
namespace {

// Rows of block n of sequence b in Y, lse and the token losses, bitwise.
bool block_rows_identical(const DrafterOutputs<double>& x, const DrafterOutputs<double>& y, std::int64_t b,
                          std::int64_t n, std::int64_t B) {
  const std::int64_t T = x.lse.dim(1), H = x.hidden.dim(2);
  auto same = [](const double* p, const double* q, std::int64_t count) {
    return std::memcmp(p, q, static_cast<std::size_t>(count) * sizeof(double)) == 0;
  };
  const std::int64_t row = b * T + n * B;
  return same(x.hidden.data() + row * H, y.hidden.data() + row * H, B * H) &&
         same(x.lse.data() + row, y.lse.data() + row, B) &&
         same(x.token_loss.data() + row, y.token_loss.data() + row, B) &&
         same(x.weights.data() + row, y.weights.data() + row, B);
}

struct MaskCase {
  DrafterCase c;
  std::int64_t sequence = 0;  // b
  std::int64_t block = 0;     // n, a kept block
};

void showValue(const MaskCase& m, std::ostream& os) {
  showValue(m.c, os);
  os << "\nsequence " << m.sequence << ", block " << m.block;
}

// A case with explicit anchors and a kept block n of sequence b (its slots, not sampled ones,
// are what the properties move around).
rc::Gen<MaskCase> gen_mask_case(bool all_sliding) {
  return rc::gen::exec([all_sliding] {
    MaskCase m;
    m.c = *gen_drafter_case(
        {.max_hidden = 6, .max_intermediate = 6, .max_layers = 3, .max_context = 14, .max_anchors = 4});
    m.c.batch.explicit_anchors = true;
    if (all_sliding) {
      for (LayerType& t : m.c.config.layer_types) t = LayerType::sliding_attention;
    }
    m.sequence = *rc::gen::inRange<std::int64_t>(0, m.c.batch.sequences);
    m.block = *rc::gen::inRange<std::int64_t>(0, m.c.batch.anchor_slots);
    return m;
  });
}

// Another token than x that is not the mask token (x itself when there is none).
std::int64_t other_token(std::int64_t x, std::int64_t vocab, std::int64_t mask_token) {
  for (std::int64_t step = 1; step < vocab; ++step) {
    if ((x + step) % vocab != mask_token) return (x + step) % vocab;
  }
  return x;
}

DrafterOutputs<double> forward(DrafterProblem& p, const DrafterCase& c) {
  return drafter_forward(p.tracker, c.config, p.params, p.frozen, p.batch, c.options);
}

// Changing F at positions >= a_n, another block's input token, another block's anchor, and
// another block's keep flag (all at once) leaves block n bitwise unchanged.
RC_GTEST_PROP(DrafterMask, BlockIsBlindToLaterFeaturesAndToOtherBlocks, ()) {
  const MaskCase m = *gen_mask_case(false);
  const DrafterCase& c = m.c;
  DrafterProblem p(c);
  const std::int64_t b = m.sequence, n = m.block, B = c.config.block_size, S = c.batch.context_length;
  Tensor<std::int64_t>& anchors = *p.batch.anchors;
  Tensor<std::uint8_t>& keep = *p.batch.keep;
  RC_PRE(keep.row(b)[n] == 1);
  const std::int64_t a = anchors.row(b)[n];
  const DrafterOutputs<double> before = forward(p, c);

  CounterRng rng(c.batch.seed, 0x5EE);
  const std::int64_t KH = c.config.feature_width();
  for (std::int64_t j = a; j < S; ++j) {
    for (std::int64_t e = 0; e < KH; ++e) p.batch.target_features[(b * S + j) * KH + e] = rng.uniform(-2, 2);
  }
  const std::int64_t N = anchors.dim(1);
  for (std::int64_t other = 0; other < N; ++other) {
    if (other == n) continue;
    std::int64_t& a_other = anchors.row(b)[other];
    // Its input token x[a_other], unless that position is one of block n's labels.
    if (keep.row(b)[other] == 1 && !(a_other > a && a_other < a + B)) {
      std::int64_t& x = p.batch.tokens.row(b)[a_other];
      x = other_token(x, c.config.vocab_size, c.config.mask_token_id);
    }
    // Its anchor: anywhere between the neighbouring kept anchors (any position if not kept).
    std::int64_t low = 0, high = S - 1;
    for (std::int64_t q = other - 1; q >= 0 && keep.row(b)[other] == 1; --q) {
      if (keep.row(b)[q] == 1) {
        low = anchors.row(b)[q] + 1;
        break;
      }
    }
    for (std::int64_t q = other + 1; q < N && keep.row(b)[other] == 1; ++q) {
      if (keep.row(b)[q] == 1) {
        high = anchors.row(b)[q] - 1;
        break;
      }
    }
    a_other = low + rng.below(high - low + 1);
  }
  // And one other kept block dropped altogether.
  for (std::int64_t other = 0; other < N; ++other) {
    if (other != n && keep.row(b)[other] == 1) {
      keep.row(b)[other] = 0;
      break;
    }
  }
  const DrafterOutputs<double> after = forward(p, c);
  RC_ASSERT(block_rows_identical(before, after, b, n, B));
}

// With every layer sliding, context rows j <= a_n - window are outside every query's window.
RC_GTEST_PROP(DrafterMask, SlidingLayersAreBlindOutsideTheWindow, ()) {
  const MaskCase m = *gen_mask_case(true);
  const DrafterCase& c = m.c;
  DrafterProblem p(c);
  const std::int64_t b = m.sequence, n = m.block, S = c.batch.context_length, W = *c.config.sliding_window;
  RC_PRE(p.batch.keep->row(b)[n] == 1);
  const std::int64_t a = p.batch.anchors->row(b)[n];
  RC_PRE(a - W >= 0);
  const DrafterOutputs<double> before = forward(p, c);
  CounterRng rng(c.batch.seed, 0x51D);
  const std::int64_t KH = c.config.feature_width();
  for (std::int64_t j = 0; j <= a - W; ++j) {
    for (std::int64_t e = 0; e < KH; ++e) p.batch.target_features[(b * S + j) * KH + e] = rng.uniform(-2, 2);
  }
  RC_ASSERT(block_rows_identical(before, forward(p, c), b, n, c.config.block_size));
}

// The control: with every layer full, the block does see the context just before its anchor
// (dropout off: a dropped-out attention branch would hide everything, visible or not).
RC_GTEST_PROP(DrafterMask, FullLayersSeeTheContextBeforeTheAnchor, ()) {
  MaskCase m = *gen_mask_case(false);
  for (LayerType& t : m.c.config.layer_types) t = LayerType::full_attention;
  m.c.config.attention_dropout = 0;
  m.c.config.hidden_dropout = 0;
  const DrafterCase& c = m.c;
  DrafterProblem p(c);
  const std::int64_t b = m.sequence, n = m.block, S = c.batch.context_length;
  RC_PRE(p.batch.keep->row(b)[n] == 1);
  const std::int64_t a = p.batch.anchors->row(b)[n];
  RC_PRE(a >= 1);
  const DrafterOutputs<double> before = forward(p, c);
  const std::int64_t KH = c.config.feature_width();
  for (std::int64_t e = 0; e < KH; ++e) p.batch.target_features[(b * S + a - 1) * KH + e] += 0.5;
  RC_ASSERT(!block_rows_identical(before, forward(p, c), b, n, c.config.block_size));
}

}  // namespace
}  // namespace dflash
