// The RNG coordinates of SPEC §6: stream layout, element -> (counter, word), drop threshold.
#include <gtest/gtest.h>

#include "common/dropout_rng.hpp"
#include "common/dropout_site_view.hpp"

namespace dflash {
namespace {

TEST(DropoutRng, StreamPacksSequenceLayerSite) {
  EXPECT_EQ(rng_stream(0, 0, 1), 1u);
  EXPECT_EQ(rng_stream(1, 0, 0), 1u << 12);
  EXPECT_EQ(rng_stream(3, 0xFF, 0), (3u << 12) | 0xFF0u);
  EXPECT_EQ(rng_stream((1u << 20) - 1, 254, 3), (((1u << 20) - 1) << 12) | (254u << 4) | 3u);
}

TEST(DropoutRng, ElementSelectsCounterBlockAndWord) {
  const std::uint64_t seed = 0xfeedface12345678ULL;
  const std::uint32_t stream = rng_stream(7, 2, 3), step = 42;
  for (std::uint64_t e : {0ULL, 1ULL, 2ULL, 3ULL, 4ULL, 1001ULL, (1ULL << 34) + 6}) {
    const std::uint64_t block = e / 4;
    const Philox4x32 words =
        philox4x32_10({{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), stream, step}},
                      philox_key_from_seed(seed));
    EXPECT_EQ(rng_word(seed, stream, step, e), words.v[e % 4]) << "element " << e;
  }
}

TEST(DropoutRng, ThresholdIsFloorOfPTimesTwoToThe32) {
  EXPECT_EQ(dropout_threshold(0.0), 0u);
  EXPECT_EQ(dropout_threshold(0.5), 0x80000000u);
  EXPECT_EQ(dropout_threshold(0.25), 0x40000000u);
  EXPECT_EQ(dropout_threshold(0.1), 429496729u);  // floor(0.1 * 4294967296) = floor(429496729.6)
  EXPECT_EQ(dropout_threshold(0.999999999), 4294967291u);
}

TEST(DropoutRng, ZeroProbabilityKeepsEverything) {
  for (std::uint64_t e = 0; e < 1000; ++e)
    EXPECT_TRUE(dropout_keeps(1, rng_stream(0, 0, 2), 0, e, dropout_threshold(0)));
}

// The keep decision at its boundary (SPEC §6: dropped iff word < threshold). For real Philox words w at
// real coordinates, p = w / 2^32 makes the threshold exactly w: the word equal to the threshold is
// kept, a threshold one below keeps it, one above drops it, in the raw decision and in the site view
// the kernels read. A `>=` turned into `>` (or `<=`) fails here and nowhere else.
TEST(DropoutRng, WordEqualToThresholdIsKeptAndOneAboveIsDropped) {
  const std::uint64_t seed = 0x0123456789abcdefULL;
  const std::uint32_t step = 7;
  for (DropoutSite site : {DropoutSite::attention_probs, DropoutSite::attention_residual, DropoutSite::mlp_residual}) {
    const std::uint32_t stream = rng_stream(3, 1, static_cast<std::uint32_t>(site));
    for (std::uint64_t e : {0ULL, 5ULL, 1234ULL, (1ULL << 33) + 3}) {
      const std::uint32_t w = rng_word(seed, stream, step, e);
      ASSERT_GT(w, 0u);
      ASSERT_LT(w, 0xFFFFFFFFu);
      const double p = static_cast<double>(w) / 4294967296.0;  // exact: w < 2^32 fits a double
      ASSERT_EQ(dropout_threshold(p), w);
      EXPECT_TRUE(dropout_keeps(seed, stream, step, e, w)) << "word == threshold, element " << e;
      EXPECT_TRUE(dropout_keeps(seed, stream, step, e, w - 1)) << "word == threshold + 1, element " << e;
      EXPECT_FALSE(dropout_keeps(seed, stream, step, e, w + 1)) << "word == threshold - 1, element " << e;
      const DropoutSiteView view = dropout_site_view(seed, step, 3, 1, site, p);
      EXPECT_EQ(view.factor(e), view.scale) << "element " << e;
      DropoutSiteView above = view;
      above.threshold = w + 1;
      EXPECT_EQ(above.factor(e), 0.0f) << "element " << e;
    }
  }
}

}  // namespace
}  // namespace dflash
