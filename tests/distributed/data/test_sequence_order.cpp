// The data order of TRAINING §14: each epoch a permutation sorted by Philox word 0 of
// (i, 0, 0xFFFFF, e) under the seed's key, ties by i; the cursor continues across epochs.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "common/philox.hpp"
#include "distributed/data/sequence_order.hpp"
#include "io/errors.hpp"

namespace dflash {
namespace {

TEST(DataOrder, KeyIsWordZeroOfPhiloxAtTheSpecCounter) {
  // Written out from §14 (counter words, key from the seed's halves), not through data_order_key's code.
  const std::uint64_t seed = 0x123456789ABCDEF0ull;
  const Philox4x32 words = philox4x32_10(Philox4x32{{7u, 0u, 0xFFFFFu, 3u}}, Philox2x32Key{{0x9ABCDEF0u, 0x12345678u}});
  EXPECT_EQ(data_order_key(seed, 7, 3), words.v[0]);
}

TEST(DataOrder, EpochIsThePermutationSortedByKeyTiesByIndex) {
  const std::uint64_t seed = 42;
  for (std::int64_t epoch : {0, 1, 5}) {
    const std::vector<std::int64_t> order = epoch_order(50, seed, epoch);
    std::vector<std::int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::int64_t> all(50);
    std::iota(all.begin(), all.end(), 0);
    ASSERT_EQ(sorted, all) << "epoch " << epoch << " is not a permutation";
    for (std::size_t j = 1; j < order.size(); ++j) {
      const std::uint32_t a = data_order_key(seed, order[j - 1], epoch), b = data_order_key(seed, order[j], epoch);
      EXPECT_TRUE(a < b || (a == b && order[j - 1] < order[j])) << "epoch " << epoch << " position " << j;
    }
  }
  EXPECT_NE(epoch_order(50, seed, 0), epoch_order(50, seed, 1));
  EXPECT_NE(epoch_order(50, seed, 0), epoch_order(50, seed + 1, 0));
}

TEST(DataOrder, BatchesFollowTheCursorAcrossEpochs) {
  const std::int64_t n = 7;
  DataOrder order(n, 9);
  std::vector<std::int64_t> expected;
  for (std::int64_t e = 0; e < 3; ++e) {
    const std::vector<std::int64_t> epoch = epoch_order(n, 9, e);
    expected.insert(expected.end(), epoch.begin(), epoch.end());
  }
  DataCursor cursor;
  std::vector<std::int64_t> got;
  for (int step = 0; step < 5; ++step) {  // 5 batches of 4 = 20 sequences: spans epochs 0, 1, 2
    const std::vector<std::int64_t> batch = order.batch(cursor, 4);
    got.insert(got.end(), batch.begin(), batch.end());
  }
  EXPECT_EQ(got, std::vector<std::int64_t>(expected.begin(), expected.begin() + 20));
  EXPECT_EQ(cursor, (DataCursor{2, 6}));
  // A fresh order resumed from a saved cursor continues identically.
  DataOrder resumed(n, 9);
  DataCursor saved{1, 5};
  const std::vector<std::int64_t> next = resumed.batch(saved, 4);
  EXPECT_EQ(next, std::vector<std::int64_t>(expected.begin() + 12, expected.begin() + 16));
}

TEST(DataOrder, BatchLargerThanTheSetSpansSeveralEpochs) {
  DataOrder order(3, 1);
  DataCursor cursor;
  EXPECT_EQ(order.batch(cursor, 7).size(), 7u);
  EXPECT_EQ(cursor, (DataCursor{2, 1}));
}

TEST(DataOrder, CursorOutsideTheSetIsRefused) {
  DataOrder order(3, 1);
  DataCursor cursor{0, 3};
  EXPECT_THROW(order.batch(cursor, 1), InputError);
  EXPECT_THROW(DataOrder(0, 1), InputError);
}

}  // namespace
}  // namespace dflash
