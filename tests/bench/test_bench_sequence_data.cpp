// libdflash_bench_data.so's synthetic drafter sequence (bench/cuda/drafter_sequence_data.cpp, host
// code): the anchors and block rows the reference's prepare_sequences makes of the same tokens and
// loss mask, and a clear error for a bad shape.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "bench/cuda/bench_data.hpp"
#include "common/dropout_rng.hpp"
#include "reference/drafter.hpp"

namespace dflash {
namespace {

struct Rows {
  std::vector<std::int64_t> anchors, tokens, positions, labels, teacher_rows;
  std::vector<std::uint8_t> keep, valid;
  std::vector<float> weights;
  std::string error = std::string(256, '\0');
  int status = 0;
};

Rows call(long long S, long long V, long long B, long long mask_token, long long N, double gamma, std::uint64_t seed,
          std::uint64_t anchor_seed) {
  Rows r;
  const auto T = static_cast<std::size_t>(N * B);
  r.anchors.resize(static_cast<std::size_t>(N));
  r.keep.resize(static_cast<std::size_t>(N));
  for (auto* v : {&r.tokens, &r.positions, &r.labels, &r.teacher_rows}) v->resize(T);
  r.valid.resize(T);
  r.weights.resize(T);
  r.status = dflash_bench_drafter_sequence(S, V, B, mask_token, N, gamma, seed, anchor_seed, r.anchors.data(),
                                           r.keep.data(), r.tokens.data(), r.positions.data(), r.labels.data(),
                                           r.teacher_rows.data(), r.weights.data(), r.valid.data(), r.error.data(),
                                           static_cast<long long>(r.error.size()));
  return r;
}

// 48 tokens with a prompt of 12 leave 35 candidates: 8 slots all kept; 40 slots leave 5 unkept.
// A decay gamma of 0 is a config's null (no decay: every weight 1), as the PyTorch peer passes it.
TEST(BenchSequenceData, EqualsTheReferencesBlockRows) {
  for (const auto& [N, gamma] : {std::pair{8LL, 3.0}, std::pair{40LL, 3.0}, std::pair{8LL, 0.0}}) {
    SCOPED_TRACE(gamma);
    const long long S = 48, V = 97, B = 4, mask_token = 96;
    const std::uint64_t seed = 11, anchor_seed = 5;
    const Rows r = call(S, V, B, mask_token, N, gamma, seed, anchor_seed);
    ASSERT_EQ(r.status, 0) << r.error.c_str();

    MemoryTracker tracker;
    DrafterBatch<double> batch;
    batch.tokens = Tensor<std::int64_t>(tracker, MemoryCategory::inputs, {1, S});
    batch.loss_mask = Tensor<std::uint8_t>(tracker, MemoryCategory::inputs, {1, S});
    for (long long p = 0; p < S; ++p) {
      batch.tokens[p] = static_cast<std::int64_t>(rng_word(seed, 7, 0, static_cast<std::uint64_t>(p)) % V);
      batch.loss_mask[p] = p >= S / 4 ? 1 : 0;
    }
    DrafterConfig config;
    config.max_anchors = N;
    config.seed = anchor_seed;
    config.block_size = B;
    config.mask_token_id = mask_token;
    config.loss_decay_gamma = gamma > 0 ? std::optional<double>(gamma) : std::nullopt;
    const PreparedSequence<double> s = prepare_sequences(config, batch, DrafterStepOptions{}).at(0);
    EXPECT_EQ(s.slots.anchors, r.anchors);
    EXPECT_EQ(s.slots.keep, r.keep);
    EXPECT_EQ(s.blocks.input_tokens, r.tokens);
    EXPECT_EQ(s.blocks.positions, r.positions);
    EXPECT_EQ(s.blocks.labels, r.labels);
    EXPECT_EQ(s.blocks.teacher_rows, r.teacher_rows);
    EXPECT_EQ(s.blocks.valid, r.valid);
    for (std::size_t i = 0; i < r.weights.size(); ++i) EXPECT_EQ(r.weights[i], static_cast<float>(s.blocks.weights[i]));
    long long kept = 0;
    for (std::uint8_t k : r.keep) kept += k;
    EXPECT_EQ(kept, N == 8 ? 8 : 35);
  }
}

TEST(BenchSequenceData, ABadShapeIsRefusedWithTheReason) {
  const Rows r = call(1, 97, 4, 96, 2, 0.0, 1, 1);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(std::string(r.error.c_str()).find("context 1"), std::string::npos) << r.error.c_str();
}

}  // namespace
}  // namespace dflash
