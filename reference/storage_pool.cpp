#include "reference/storage_pool.hpp"

#include <malloc.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <stdexcept>

#include "io/errors.hpp"
#include "reference/threads.hpp"

namespace dflash {
namespace {

template <class T>
struct CachedBlock {
  std::vector<T> block;
  std::uint64_t cached_at = 0;  // the pool's clock when it was cached: eviction takes the oldest
};

// One per element type.
template <class T>
struct Pool {
  std::mutex mutex;
  // By element count; blocks of one count in caching order (multimap inserts at the end of an
  // equal range), so the newest is last: reusing it first touches memory most likely in cache.
  std::multimap<std::size_t, CachedBlock<T>> cached;
  std::uint64_t clock = 0;
  StoragePoolState state;
};

// Never destroyed: a tensor in a static object may be recycled after main returns, when a static
// pool would already be gone. The OS takes the cached blocks back at exit.
template <class T>
Pool<T>& pool() {
  static Pool<T>* const p = new Pool<T>;
  return *p;
}

template <class T>
bool pooled(std::size_t n) {
  return n * sizeof(T) >= kPooledStorageMinBytes;
}

// From 1 MiB a reused block is zeroed by the reference's threads, a contiguous range each: on the
// allocating thread alone the fill is serial work between parallel parts (~3% of the main thread's
// time in a 2-thread `mid` drafter step, by perf). Below it, waking the threads costs about what
// the fill does (tens of microseconds).
constexpr std::size_t kThreadedFillMinBytes = std::size_t(1) << 20;

template <class T>
void fill_zero(std::vector<T>& block) {
  if (block.size() * sizeof(T) < kThreadedFillMinBytes) {
    std::fill(block.begin(), block.end(), T(0));
    return;
  }
  run_row_ranges(static_cast<std::int64_t>(block.size()), [&](std::int64_t begin, std::int64_t end) {
    std::fill(block.begin() + begin, block.begin() + end, T(0));
  });
}

// Drops the least recently cached block (its memory goes back to malloc, and so to the OS).
template <class T>
void evict_oldest(Pool<T>& p) {
  const auto oldest = std::min_element(p.cached.begin(), p.cached.end(), [](const auto& a, const auto& b) {
    return a.second.cached_at < b.second.cached_at;
  });
  p.state.cached_bytes -= oldest->first * sizeof(T);
  p.cached.erase(oldest);
}

// Frees p's cached blocks and restarts its high-water mark; returns the bytes freed.
template <class T>
std::size_t release_cached(Pool<T>& p) {
  std::multimap<std::size_t, CachedBlock<T>> freed;
  {
    const std::lock_guard lock(p.mutex);
    freed.swap(p.cached);
    p.state.cached_bytes = 0;
    p.state.high_water_bytes = p.state.live_bytes;
  }
  std::size_t bytes = 0;
  for (const auto& [n, block] : freed) bytes += n * sizeof(T);
  return bytes;  // the blocks are freed here, outside the lock
}

template <class T>
StoragePoolState state_of(Pool<T>& p) {
  const std::lock_guard lock(p.mutex);
  return p.state;
}

}  // namespace

template <class T>
std::vector<T> zeroed_storage(std::size_t n) {
  static_assert(kPooledElement<T>);
  if (!pooled<T>(n)) return std::vector<T>(n);
  Pool<T>& p = pool<T>();
  const std::size_t bytes = n * sizeof(T);
  std::vector<T> block;
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
  if (block.empty()) return std::vector<T>(n);
  fill_zero(block);
  return block;
}

template <class T>
void recycle_storage(std::vector<T>& storage) {
  std::vector<T> block = std::move(storage);  // leaves `storage` empty
  if (!pooled<T>(block.size())) return;       // freed with `block`
  Pool<T>& p = pool<T>();
  const std::size_t n = block.size(), bytes = n * sizeof(T);
  const std::lock_guard lock(p.mutex);
  if (bytes > p.state.live_bytes) {
    // A block that zeroed_storage never handed out: a bookkeeping bug, never bad user input.
    throw std::logic_error(
        str("recycle_storage: ", bytes, " B returned but only ", p.state.live_bytes, " B of pooled storage are live"));
  }
  p.state.live_bytes -= bytes;
  p.state.cached_bytes += bytes;
  p.cached.emplace(n, CachedBlock<T>{std::move(block), ++p.clock});
}

template std::vector<double> zeroed_storage<double>(std::size_t);
template std::vector<std::uint16_t> zeroed_storage<std::uint16_t>(std::size_t);
template void recycle_storage<double>(std::vector<double>&);
template void recycle_storage<std::uint16_t>(std::vector<std::uint16_t>&);

std::size_t release_cached_storage() {
  const std::size_t bytes = release_cached(pool<double>()) + release_cached(pool<std::uint16_t>());
#if defined(__GLIBC__)
  // Blocks under malloc's mmap threshold (raised at run time up to 32 MiB), these or any other the
  // process freed, stay in malloc's free lists, resident: handed back to the OS too.
  malloc_trim(0);
#endif
  return bytes;
}

StoragePoolState storage_pool_state() {
  const StoragePoolState a = state_of(pool<double>()), b = state_of(pool<std::uint16_t>());
  return {a.live_bytes + b.live_bytes, a.cached_bytes + b.cached_bytes, a.high_water_bytes + b.high_water_bytes,
          a.reused + b.reused, a.fresh + b.fresh};
}

}  // namespace dflash
