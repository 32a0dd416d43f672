// The storage pool of reference/storage_pool.hpp: a freed block goes to the next request of its
// size, zero-filled like a fresh one; trackers count tensors, not cached blocks; the pool never
// holds more than its high-water mark. The pool is process-wide and other tests in this binary use
// it, so each test reads the state before and compares differences, with sizes no other test uses.
#include <gtest/gtest.h>

#include <algorithm>

#include "reference/storage_pool.hpp"
#include "reference/tensor.hpp"
#include "tests/reference/thread_count.hpp"

namespace dflash {
namespace {

constexpr std::size_t kPooledDoubles = kPooledStorageMinBytes / sizeof(double);

bool all_zero(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0; });
}

TEST(StoragePool, AFreedBlockIsReusedForItsSizeAndZeroedAgain) {
  const std::size_t n = kPooledDoubles + 3;
  std::vector<double> a = zeroed_storage(n);
  ASSERT_EQ(a.size(), n);
  EXPECT_TRUE(all_zero(a));
  std::fill(a.begin(), a.end(), 7.5);
  const double* block = a.data();
  recycle_storage(a);
  EXPECT_TRUE(a.empty());
  const StoragePoolState before = storage_pool_state();
  std::vector<double> b = zeroed_storage(n);
  EXPECT_EQ(b.data(), block);  // the same block, not a fresh one
  EXPECT_EQ(storage_pool_state().reused, before.reused + 1);
  EXPECT_EQ(storage_pool_state().fresh, before.fresh);
  EXPECT_TRUE(all_zero(b));  // not the 7.5 it held
  recycle_storage(b);
}

TEST(StoragePool, ALargeReusedBlockIsZeroedWholeOnOneTwoAndThreeThreads) {
  // Over the 1 MiB from which the reference's threads share the fill, and not a multiple of 2 or 3
  // elements, so the threads' ranges are uneven.
  const std::size_t n = (std::size_t(1) << 20) / sizeof(double) + 7;
  for (int threads : {1, 2, 3}) {
    const ThreadCount count(threads);
    std::vector<double> a = zeroed_storage(n);
    std::fill(a.begin(), a.end(), 7.5);
    recycle_storage(a);
    const std::uint64_t reused = storage_pool_state().reused;
    std::vector<double> b = zeroed_storage(n);
    EXPECT_EQ(storage_pool_state().reused, reused + 1) << threads << " threads";
    EXPECT_TRUE(all_zero(b)) << threads << " threads";
    recycle_storage(b);
  }
}

TEST(StoragePool, SmallBlocksAreLeftToMalloc) {
  const StoragePoolState before = storage_pool_state();
  std::vector<double> a = zeroed_storage(kPooledDoubles - 1);
  EXPECT_EQ(a.size(), kPooledDoubles - 1);
  EXPECT_TRUE(all_zero(a));
  recycle_storage(a);
  const StoragePoolState after = storage_pool_state();
  EXPECT_EQ(after.fresh, before.fresh);
  EXPECT_EQ(after.reused, before.reused);
  EXPECT_EQ(after.cached_bytes, before.cached_bytes);
}

TEST(StoragePool, AFreshBlockEvictsTheOldestToStayWithinTheHighWaterMark) {
  // Larger than every live total so far, so that it sets the high-water mark.
  const std::size_t n =
      std::max<std::size_t>(storage_pool_state().high_water_bytes / sizeof(double), kPooledDoubles) + 1;
  std::vector<double> a = zeroed_storage(n);
  recycle_storage(a);
  StoragePoolState s = storage_pool_state();
  EXPECT_LE(s.live_bytes + s.cached_bytes, s.high_water_bytes);
  // A block of another size: a and the rest of the cache no longer fit beside it and are evicted.
  std::vector<double> b = zeroed_storage(n + 1);
  s = storage_pool_state();
  EXPECT_LE(s.live_bytes + s.cached_bytes, s.high_water_bytes);
  const std::uint64_t fresh = s.fresh;
  std::vector<double> again = zeroed_storage(n);
  EXPECT_EQ(storage_pool_state().fresh, fresh + 1);  // a was evicted, not reused
  recycle_storage(again);
  recycle_storage(b);
  s = storage_pool_state();
  EXPECT_LE(s.live_bytes + s.cached_bytes, s.high_water_bytes);
}

// What `dflash train` calls after its start: every cached block freed, the live ones untouched,
// and the bound restarted from what is live, so the cache cannot grow back to the start's size.
TEST(StoragePool, ReleasingTheCacheFreesEveryCachedBlockAndKeepsTheLiveOnes) {
  const std::size_t n = kPooledDoubles + 11, m = kPooledDoubles + 13;  // sizes no other test uses
  std::vector<double> kept = zeroed_storage(n);
  kept[0] = 3.0;
  std::vector<double> a = zeroed_storage(m), b = zeroed_storage(m);
  recycle_storage(a);
  recycle_storage(b);
  const StoragePoolState before = storage_pool_state();
  ASSERT_GE(before.cached_bytes, 2 * m * sizeof(double));
  EXPECT_EQ(release_cached_storage(), before.cached_bytes);
  const StoragePoolState after = storage_pool_state();
  EXPECT_EQ(after.cached_bytes, 0u);
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.high_water_bytes, after.live_bytes);
  EXPECT_EQ(kept[0], 3.0);
  std::vector<double> c = zeroed_storage(m);
  EXPECT_EQ(storage_pool_state().fresh, after.fresh + 1);  // nothing left to reuse
  EXPECT_EQ(release_cached_storage(), 0u);
  recycle_storage(c);
  recycle_storage(kept);
}

TEST(StoragePool, ABlockThePoolNeverHandedOutIsABookkeepingError) {
  std::vector<double> foreign(static_cast<std::size_t>(storage_pool_state().live_bytes / sizeof(double)) +
                              kPooledDoubles);
  EXPECT_THROW(recycle_storage(foreign), std::logic_error);
}

TEST(StoragePool, TrackersCountTensorsNotCachedBlocks) {
  const std::int64_t rows = 5, cols = static_cast<std::int64_t>(kPooledDoubles) / 4;  // a size no other test uses
  const std::size_t bytes = static_cast<std::size_t>(rows * cols) * sizeof(double);
  MemoryTracker t;
  {
    Tensor<double> a(t, MemoryCategory::transient, {rows, cols});
    a[0] = 1.0;
    a[rows * cols - 1] = -2.0;
  }
  EXPECT_EQ(t.current(MemoryCategory::transient), 0u);  // its block is cached, and counted nowhere
  const StoragePoolState before = storage_pool_state();
  Tensor<double> b(t, MemoryCategory::saved, {rows, cols});
  EXPECT_EQ(storage_pool_state().reused, before.reused + 1);
  EXPECT_EQ(b[0], 0.0);
  EXPECT_EQ(b[rows * cols - 1], 0.0);
  EXPECT_EQ(t.current(MemoryCategory::saved), bytes);
  EXPECT_EQ(t.peak_total(), bytes);
}

// bf16 bits (a CUDA step's sequences) have a pool of their own: a freed block goes to the next
// bf16 tensor of its size, zeroed, and never to a double one of the same bytes.
TEST(StoragePool, Bf16BitsAreReusedFromTheirOwnPool) {
  const std::size_t n = kPooledStorageMinBytes / sizeof(std::uint16_t) * 3 + 4;  // 4 x a double count
  MemoryTracker t;
  const std::uint16_t* block = nullptr;
  {
    Tensor<std::uint16_t> a(t, MemoryCategory::inputs, {std::int64_t(n)});
    std::fill(a.data(), a.data() + n, std::uint16_t(0x3F80));
    block = a.data();
  }
  const StoragePoolState before = storage_pool_state();
  EXPECT_GE(before.cached_bytes, n * sizeof(std::uint16_t));
  {
    Tensor<double> d(t, MemoryCategory::inputs, {std::int64_t(n / 4)});  // the same bytes, another type
    EXPECT_EQ(storage_pool_state().reused, before.reused);
  }
  Tensor<std::uint16_t> b(t, MemoryCategory::inputs, {std::int64_t(n)});
  EXPECT_EQ(b.data(), block);
  EXPECT_EQ(storage_pool_state().reused, before.reused + 1);
  EXPECT_TRUE(std::all_of(b.data(), b.data() + n, [](std::uint16_t x) { return x == 0; }));
}

}  // namespace
}  // namespace dflash
