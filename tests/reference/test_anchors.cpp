// Anchor sampling, block tokens, labels, weights and teacher rows (SPEC §4).
#include <algorithm>
#include <cmath>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/dropout_rng.hpp"
#include "common/philox.hpp"
#include "io/errors.hpp"
#include "reference/anchors.hpp"
#include "reference/counter_rng.hpp"

namespace dflash {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::vector<std::uint8_t> random_mask(std::int64_t S, std::uint64_t seed, double hole) {
  CounterRng rng(seed);
  std::vector<std::uint8_t> m(static_cast<std::size_t>(S));
  for (auto& v : m) v = rng.bernoulli(hole) ? 0 : 1;
  return m;
}

// SPEC §4 written out with the raw Philox call (not through rng_word), as the independent oracle.
std::vector<std::int64_t> expected_anchors(const std::vector<std::uint8_t>& m, std::int64_t max_anchors,
                                           std::uint64_t seed, std::uint32_t step, std::uint32_t seq) {
  std::vector<std::pair<std::uint32_t, std::int64_t>> keyed;
  const std::uint32_t stream = (seq << 12) | (0xFFu << 4) | 0u;
  for (std::int64_t a = 0; a + 1 < static_cast<std::int64_t>(m.size()); ++a) {
    if (!m[a] || !m[a + 1]) continue;
    const Philox4x32 counter{{static_cast<std::uint32_t>(a), 0u, stream, step}};
    keyed.push_back({philox4x32_10(counter, philox_key_from_seed(seed)).v[0], a});
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::int64_t> out;
  for (std::size_t n = 0; n < keyed.size() && std::int64_t(n) < max_anchors; ++n) out.push_back(keyed[n].second);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(SampleAnchors, MatchesTheSpecShuffleAndPadsWithInvalidSlots) {
  for (std::uint64_t seed : {1ull, 77ull, 0x1234567890ull}) {
    for (std::int64_t S : {1, 2, 5, 40}) {
      for (std::int64_t max_anchors : {1, 3, 64}) {
        const std::vector<std::uint8_t> m = random_mask(S, seed + S, 0.3);
        const AnchorSlots got = sample_anchors(m, max_anchors, seed, 9, 5);
        const std::vector<std::int64_t> want = expected_anchors(m, max_anchors, seed, 9, 5);
        ASSERT_EQ(got.anchors.size(), static_cast<std::size_t>(max_anchors));
        ASSERT_EQ(got.keep.size(), static_cast<std::size_t>(max_anchors));
        for (std::size_t n = 0; n < got.anchors.size(); ++n) {
          if (n < want.size()) {
            EXPECT_EQ(got.anchors[n], want[n]);
            EXPECT_EQ(got.keep[n], 1);
            EXPECT_TRUE(m[want[n]] && m[want[n] + 1]) << "anchor " << want[n] << " is not a candidate";
          } else {
            EXPECT_EQ(got.anchors[n], 0);
            EXPECT_EQ(got.keep[n], 0);
          }
        }
      }
    }
  }
}

TEST(SampleAnchors, DeterministicAndDependsOnSeedStepAndSequence) {
  const std::vector<std::uint8_t> m(200, 1);
  const AnchorSlots base = sample_anchors(m, 20, 42, 3, 7);
  EXPECT_EQ(sample_anchors(m, 20, 42, 3, 7).anchors, base.anchors);
  EXPECT_NE(sample_anchors(m, 20, 43, 3, 7).anchors, base.anchors);
  EXPECT_NE(sample_anchors(m, 20, 42, 4, 7).anchors, base.anchors);
  EXPECT_NE(sample_anchors(m, 20, 42, 3, 8).anchors, base.anchors);
  EXPECT_TRUE(std::is_sorted(base.anchors.begin(), base.anchors.end()));
  EXPECT_EQ(std::adjacent_find(base.anchors.begin(), base.anchors.end()), base.anchors.end());
}

TEST(SampleAnchors, RejectsBadArguments) {
  const std::vector<std::uint8_t> m(8, 1);
  EXPECT_THAT([&] { sample_anchors(m, 0, 1, 0, 0); }, ThrowsMessage<InputError>(HasSubstr("max_anchors")));
  EXPECT_THAT([&] { sample_anchors(m, 2, 1, 0, kMaxSequenceIndex); }, ThrowsMessage<InputError>(HasSubstr("1048576")));
}

// S = 9, B = 3, gamma = 2. Tokens x[p] = 10 + p; m has a hole at 3.
TEST(SequenceBlocks, LabelsWeightsAndTeacherRowsFollowTheSpec) {
  std::vector<std::int64_t> x(9);
  for (std::int64_t p = 0; p < 9; ++p) x[p] = 10 + p;
  const std::vector<std::uint8_t> m = {1, 1, 1, 0, 1, 1, 1, 1, 1};
  const AnchorSlots slots{{1, 4, 0, 7}, {1, 1, 0, 1}};
  const std::int64_t mask_id = 99;
  const SequenceBlocks<double> b = sequence_blocks<double>(x, m, slots, 3, mask_id, 2.0);

  // Block 0 (a = 1): rows at positions 1, 2, 3; position 3 is a loss-mask hole.
  // Block 1 (a = 4): positions 4, 5, 6.  Block 2: kappa = 0.  Block 3 (a = 7): positions 7, 8, 9 (9 = S).
  const std::vector<std::int64_t> tokens = {11,      mask_id, mask_id, 14, mask_id, mask_id,
                                            mask_id, mask_id, mask_id, 17, mask_id, mask_id};
  const std::vector<std::int64_t> positions = {1, 2, 3, 4, 5, 6, 0, 1, 2, 7, 8, 9};
  const std::vector<std::uint8_t> valid = {0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0};
  const std::vector<std::int64_t> labels = {-1, 12, -1, -1, 15, 16, -1, -1, -1, -1, 18, -1};
  const std::vector<std::int64_t> teacher = {-1, 1, -1, -1, 4, 5, -1, -1, -1, -1, 7, -1};
  const double w1 = 1.0, w2 = std::exp(-0.5);  // exp(-(k-1)/gamma) for k = 1, 2
  const std::vector<double> weights = {0, w1, 0, 0, w1, w2, 0, 0, 0, 0, w1, 0};
  EXPECT_EQ(b.input_tokens, tokens);
  EXPECT_EQ(b.positions, positions);
  EXPECT_EQ(b.valid, valid);
  EXPECT_EQ(b.labels, labels);
  EXPECT_EQ(b.teacher_rows, teacher);
  EXPECT_EQ(b.weights, weights);

  const SequenceBlocks<double> no_decay = sequence_blocks<double>(x, m, slots, 3, mask_id, std::nullopt);
  for (std::size_t i = 0; i < valid.size(); ++i) EXPECT_EQ(no_decay.weights[i], double(valid[i]));
}

TEST(ValidateAnchorSlots, RejectsEachBadLayout) {
  const std::int64_t S = 10;
  auto error = [&](std::vector<std::int64_t> a, std::vector<std::uint8_t> k) {
    try {
      validate_anchor_slots(a, k, S, "anchors of sequence 0");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error({1, 4, 0, 0}, {1, 1, 0, 0}), "(accepted)");
  EXPECT_EQ(error({5, 2, 7}, {1, 0, 1}), "(accepted)");  // an invalid slot may sit anywhere
  EXPECT_THAT(error({4, 1}, {1, 1}), HasSubstr("anchor[1]: 1 is not greater than the previous kept anchor 4"));
  EXPECT_THAT(error({4, 4}, {1, 1}), HasSubstr("anchor[1]: 4 is not greater"));
  EXPECT_THAT(error({2, 10}, {1, 1}), HasSubstr("anchor[1]: 10 is outside [0, S = 10)"));
  EXPECT_THAT(error({-1, 3}, {0, 1}), HasSubstr("anchor[0]: -1 is outside"));
  EXPECT_THAT(error({1, 3}, {1, 2}), HasSubstr("keep[1]: 2 is not 0 or 1"));
  EXPECT_THAT(error({1, 3}, {1}), HasSubstr("2 anchors but 1 keep flags"));
  EXPECT_THAT(error({}, {}), HasSubstr("N must be at least 1"));
}

}  // namespace
}  // namespace dflash
