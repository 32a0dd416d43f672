// accuracy_by_position and acceptance_length (TRAINING §17) on blocks written out by hand.
#include <gtest/gtest.h>

#include "distributed/metrics/block_statistics.hpp"

namespace dflash {
namespace {

TEST(BlockStatistics, HandCountedBlocks) {
  // B = 4, three blocks. Block 0: hits at k = 1, 2, miss at 3 -> accepts 1 + 2.
  // Block 1: miss at k = 1, hits at 2, 3 -> accepts 1 (stops at the first miss).
  // Block 2: hit at 1, no label at 2 (w01 = 0), hit at 3 -> accepts 1 + 1 (stops at the unlabelled row).
  // Block 3: kappa = 0 (no labels) -> not a kept block.
  const std::vector<std::uint8_t> keep{1, 1, 1, 0};
  const std::vector<std::uint8_t> valid{0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0};
  const std::vector<std::int64_t> label{-1, 5, 6, 7, -1, 5, 6, 7, -1, 5, -1, 7, -1, -1, -1, -1};
  const std::vector<std::int64_t> argmax{-1, 5, 6, 0, -1, 0, 6, 7, -1, 5, -1, 7, -1, -1, -1, -1};
  BlockStatistics s(4);
  add_block_rows(s, 4, keep, valid, label, argmax);
  EXPECT_EQ(s.accuracy_by_position(), (std::vector<double>{2.0 / 3, 2.0 / 2, 2.0 / 3}));
  EXPECT_DOUBLE_EQ(s.acceptance_length(), (3.0 + 1.0 + 2.0) / 3.0);
  // Packing is what ranks sum: two halves summed equal the whole.
  BlockStatistics a(4), b(4);
  add_block_rows(a, 4, std::span(keep).first(2), std::span(valid).first(8), std::span(label).first(8),
                 std::span(argmax).first(8));
  add_block_rows(b, 4, std::span(keep).subspan(2), std::span(valid).subspan(8), std::span(label).subspan(8),
                 std::span(argmax).subspan(8));
  std::vector<double> sum = a.packed();
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += b.packed()[i];
  EXPECT_EQ(BlockStatistics::unpacked(sum, 4).packed(), s.packed());
}

TEST(BlockStatistics, NothingLabelledGivesZeros) {
  BlockStatistics s(3);
  EXPECT_EQ(s.accuracy_by_position(), (std::vector<double>{0, 0}));
  EXPECT_EQ(s.acceptance_length(), 0);
}

}  // namespace
}  // namespace dflash
