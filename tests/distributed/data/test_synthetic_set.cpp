// `dflash data synth`: the set validates against its config, its text follows the successor map
// (the learnable part), the teacher points at the next token, and bad specs write nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "distributed/data/feature_dataset.hpp"
#include "distributed/data/synthetic_set.hpp"
#include "io/hf_checkpoint.hpp"
#include "io/json_fields.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using ::testing::HasSubstr;

TEST(SyntheticData, SuccessorIsAPermutationOfTextTokensAvoidingTheMask) {
  const DrafterConfig c = tiny_config();
  std::vector<int> hits(std::size_t(c.vocab_size), 0);
  for (std::int64_t t = 0; t < c.vocab_size; ++t) {
    if (t == c.mask_token_id) continue;
    const std::int64_t s = synthetic_successor(c, t);
    ASSERT_NE(s, c.mask_token_id);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, c.vocab_size);
    ++hits[std::size_t(s)];
  }
  for (std::int64_t t = 0; t < c.vocab_size; ++t) EXPECT_EQ(hits[std::size_t(t)], t == c.mask_token_id ? 0 : 1) << t;
}

TEST(SyntheticData, SetValidatesAndIsLearnable) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  SyntheticDataSpec spec;
  spec.sequences = 10;
  spec.shards = 3;
  write_synthetic_data(c, spec, dir / "syn");
  const FeatureDataset d = FeatureDataset::open(dir / "syn" / "features", FeatureSetShape::of(c));
  EXPECT_EQ(d.num_shards(), 3);
  EXPECT_EQ(d.num_sequences(), 10);
  std::int64_t follows = 0, pairs = 0;
  for (std::int64_t i = 0; i < d.num_sequences(); ++i) {
    const FeatureSequence q = d.sequence(i, 1000);
    EXPECT_GE(q.length(), spec.min_length);
    EXPECT_LE(q.length(), spec.max_length);
    for (std::int64_t p = 1; p < q.length(); ++p, ++pairs)
      follows += q.tokens[std::size_t(p)] == synthetic_successor(c, q.tokens[std::size_t(p) - 1]);
  }
  // noise 0.1: about 90% of the pairs follow the map (a random token can also hit it).
  EXPECT_GT(double(follows) / double(pairs), 0.8);
  const HfCheckpoint target = HfCheckpoint::open(dir / "syn" / "target");
  EXPECT_EQ(target.info("model.embed_tokens.weight").shape, (safetensors::Shape{c.vocab_size, c.hidden_size}));
  EXPECT_EQ(target.info("lm_head.weight").dtype, safetensors::Dtype::BF16);
  // The teacher of row p points at the token after it: it is W_lm's row of that token, scaled (so
  // parallel to it up to the storage rounding; the last row's next token is not in the sequence).
  const std::vector<double> lm_head = target.doubles("lm_head.weight");
  const std::int64_t H = c.hidden_size;
  std::int64_t rows = 0;
  for (std::int64_t i = 0; i < d.num_sequences(); ++i) {
    const FeatureSequence q = d.sequence(i, 1000);
    for (std::int64_t p = 0; p + 1 < q.length(); ++p, ++rows) {
      const std::int64_t next = q.tokens[std::size_t(p + 1)];
      double dot = 0, gg = 0, ww = 0;
      for (std::int64_t h = 0; h < H; ++h) {
        const double g = q.teacher_hidden[std::size_t(p * H + h)], w = lm_head[std::size_t(next * H + h)];
        dot += g * w;
        gg += g * g;
        ww += w * w;
      }
      ASSERT_GT(dot / std::sqrt(gg * ww), 0.999) << "sequence " << i << " row " << p;
    }
  }
  EXPECT_GT(rows, 0);
}

TEST(SyntheticData, TargetConfigGivesItsDepth) {
  // Deep enough for the deepest target_layer_id (3 in tiny), or the config's num_target_layers.
  DrafterConfig c = tiny_config();
  for (const std::int64_t want : {std::int64_t(4), std::int64_t(9)}) {
    if (want != 4) c.num_target_layers = want;
    ScratchDirectory dir;
    SyntheticDataSpec spec;
    spec.sequences = 2;
    spec.shards = 1;
    write_synthetic_data(c, spec, dir / "syn");
    EXPECT_EQ(synthetic_target_depth(c), want);
    EXPECT_EQ(read_json_file(dir / "syn" / "target" / "config.json").at("num_hidden_layers"), want);
  }
}

TEST(SyntheticData, BadSpecOrNonEmptyOutWritesNothing) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  SyntheticDataSpec spec;
  spec.max_length = 4;  // below min_length 16
  EXPECT_THAT(input_error_message([&] { write_synthetic_data(c, spec, dir / "a"); }), HasSubstr("--max-length"));
  EXPECT_FALSE(std::filesystem::exists(dir / "a"));
  write_whole_file(dir / "b", "x");
  EXPECT_THAT(input_error_message([&] { write_synthetic_data(c, SyntheticDataSpec{}, dir / "b"); }),
              HasSubstr("not an empty directory"));
}

// Issue 22, class 2: a sequence's features are max_length x K H values; past 64-bit byte counts the
// product wrapped. The config's own sizes fit (validate_drafter_config checks those); the spec's
// product is refused naming --max-length before anything is allocated or written.
TEST(SyntheticData, SequenceSizePast64BitsIsRefusedBeforeAnythingIsWritten) {
  DrafterConfig c = tiny_config();
  c.hidden_size = std::int64_t(1) << 29;  // K H = 2^30: fits, as does fc = 2^59
  validate_drafter_config(c);
  ScratchDirectory dir;
  SyntheticDataSpec spec;
  spec.sequences = 1;
  spec.shards = 1;
  spec.min_length = 2;
  spec.max_length = std::int64_t(1) << 31;
  const std::string message = input_error_message([&] { write_synthetic_data(c, spec, dir / "a"); });
  EXPECT_THAT(message, HasSubstr("--max-length"));
  EXPECT_THAT(message, HasSubstr("2147483648 rows of 1073741824 features"));
  EXPECT_FALSE(std::filesystem::exists(dir / "a"));
}

}  // namespace
}  // namespace dflash
