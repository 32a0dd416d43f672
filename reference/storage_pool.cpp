#include "reference/storage_pool.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <stdexcept>

#include "io/errors.hpp"
#include "reference/threads.hpp"

namespace dflash {
namespace {

struct CachedBlock {
  std::vector<double> block;
  std::uint64_t cached_at = 0;  // the pool's clock when it was cached: eviction takes the oldest
};

struct Pool {
  std::mutex mutex;
  // By element count; blocks of one count in caching order (multimap inserts at the end of an
  // equal range), so the newest is last: reusing it first touches memory most likely in cache.
  std::multimap<std::size_t, CachedBlock> cached;
  std::uint64_t clock = 0;
  StoragePoolState state;
};

// Never destroyed: a tensor in a static object may be recycled after main returns, when a static
// pool would already be gone. The OS takes the cached blocks back at exit.
Pool& pool() {
  static Pool* const p = new Pool;
  return *p;
}

bool pooled(std::size_t n) { return n * sizeof(double) >= kPooledStorageMinBytes; }

// From 1 MiB a reused block is zeroed by the reference's threads, a contiguous range each: on the
// allocating thread alone the fill is serial work between parallel parts (~3% of the main thread's
// time in a 2-thread `mid` drafter step, by perf). Below it, waking the threads costs about what
// the fill does (tens of microseconds).
constexpr std::size_t kThreadedFillMinBytes = std::size_t(1) << 20;

void fill_zero(std::vector<double>& block) {
  if (block.size() * sizeof(double) < kThreadedFillMinBytes) {
    std::fill(block.begin(), block.end(), 0.0);
    return;
  }
  run_row_ranges(static_cast<std::int64_t>(block.size()), [&](std::int64_t begin, std::int64_t end) {
    std::fill(block.begin() + begin, block.begin() + end, 0.0);
  });
}

// Drops the least recently cached block (its memory goes back to malloc, and so to the OS).
void evict_oldest(Pool& p) {
  const auto oldest = std::min_element(p.cached.begin(), p.cached.end(), [](const auto& a, const auto& b) {
    return a.second.cached_at < b.second.cached_at;
  });
  p.state.cached_bytes -= oldest->first * sizeof(double);
  p.cached.erase(oldest);
}

}  // namespace

std::vector<double> zeroed_storage(std::size_t n) {
  if (!pooled(n)) return std::vector<double>(n);
  Pool& p = pool();
  const std::size_t bytes = n * sizeof(double);
  std::vector<double> block;
  {
    const std::lock_guard lock(p.mutex);
    p.state.live_bytes += bytes;
    const auto [first, last] = p.cached.equal_range(n);
    if (first != last) {
      const auto newest = std::prev(last);
      block = std::move(newest->second.block);
      p.cached.erase(newest);
      p.state.cached_bytes -= bytes;
      ++p.state.reused;
    } else {
      ++p.state.fresh;
      p.state.high_water_bytes = std::max(p.state.high_water_bytes, p.state.live_bytes);
      while (!p.cached.empty() && p.state.live_bytes + p.state.cached_bytes > p.state.high_water_bytes) {
        evict_oldest(p);
      }
    }
  }
  // Outside the lock: the fill (or the fresh pages' faults) is the expensive part.
  if (block.empty()) return std::vector<double>(n);
  fill_zero(block);
  return block;
}

void recycle_storage(std::vector<double>& storage) {
  std::vector<double> block = std::move(storage);  // leaves `storage` empty
  if (!pooled(block.size())) return;               // freed with `block`
  Pool& p = pool();
  const std::size_t n = block.size(), bytes = n * sizeof(double);
  const std::lock_guard lock(p.mutex);
  if (bytes > p.state.live_bytes) {
    // A block that zeroed_storage never handed out: a bookkeeping bug, never bad user input.
    throw std::logic_error(
        str("recycle_storage: ", bytes, " B returned but only ", p.state.live_bytes, " B of pooled storage are live"));
  }
  p.state.live_bytes -= bytes;
  p.state.cached_bytes += bytes;
  p.cached.emplace(n, CachedBlock{std::move(block), ++p.clock});
}

std::size_t release_cached_storage() {
  std::multimap<std::size_t, CachedBlock> freed;
  Pool& p = pool();
  {
    const std::lock_guard lock(p.mutex);
    freed.swap(p.cached);
    p.state.cached_bytes = 0;
    p.state.high_water_bytes = p.state.live_bytes;
  }
  std::size_t bytes = 0;
  for (const auto& [n, block] : freed) bytes += n * sizeof(double);
  return bytes;  // the blocks are freed here, outside the lock
}

StoragePoolState storage_pool_state() {
  Pool& p = pool();
  const std::lock_guard lock(p.mutex);
  return p.state;
}

}  // namespace dflash
