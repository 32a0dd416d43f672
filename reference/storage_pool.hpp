// Where the storage of the reference's double tensors (and of bf16 bits) comes from: a process-wide
// cache of freed blocks, each handed to the next tensor of exactly its size.
//
// Why: glibc serves a block of at least its mmap threshold (128 KiB, raised at run time up to
// 32 MiB) by mapping fresh pages and unmaps it on free, so without a cache every large tensor of
// every step was new memory: the kernel faulted in and zeroed each of its pages on first touch,
// serially, on the thread that allocates (issue 14: ~32 000 faults and 0.1 s of system time per
// `mid` drafter step, ~256 000 faults and 0.65 s per loss-head step at V 32000, a serial tenth of a
// step that capped its 2-thread speed-up). A step after the first now maps nothing.
//
// What it does not change:
// - Values. A reused block is filled with +0.0 exactly as a fresh one is, so a tensor's bits never
//   depend on what its storage held before, on reuse, or on the thread count.
// - What a MemoryTracker counts. A tensor still counts numel * sizeof(T) while it lives; a cached
//   block belongs to no tensor and is counted by no tracker (capacity the process holds, like
//   malloc's own free lists), so every tracked peak equals the memory plan as before.
// - The 50-digit judge and other element types: only Tensor<double> and Tensor<std::uint16_t> (bf16
//   bits: a CUDA step's sequences, distributed/rank_sequences.hpp, 4 GB a rank and step at full
//   scale) draw from here, each type from a pool of its own under the same rules.
//
// Bound: cached + live pooled bytes never exceed the largest live pooled total seen so far, or
// since the last release_cached_storage() (the high-water mark). Steps of one shape then reuse every
// block and evict none, and the process never holds more pooled memory than it once needed at
// once; a fresh block that would break the bound evicts the least recently cached blocks first.
//
// Thread-safe (one mutex): the reference allocates on the calling thread, never inside its
// parallel parts (its MemoryTracker is not shared across threads either), but separate reference
// runs may run on separate threads of one process and share this cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace dflash {

// Smaller blocks come from malloc as before: a block under a page shares its pages with others, so
// it costs no fault of its own, and glibc's per-thread caches serve it faster than this locked map.
// From a page up a block can be fresh pages: glibc maps every block from 128 KiB (its initial
// M_MMAP_THRESHOLD) and hands the top of its heap back to the OS once more than M_TRIM_THRESHOLD of
// it is free, which a step's medium-sized tensors, freed together, can exceed.
inline constexpr std::size_t kPooledStorageMinBytes = 4096;

// The element types that draw from a pool.
template <class T>
inline constexpr bool kPooledElement = std::is_same_v<T, double> || std::is_same_v<T, std::uint16_t>;

// n values of T, every one zero: a cached block of exactly n when there is one, else a new one.
template <class T = double>
std::vector<T> zeroed_storage(std::size_t n);

// Takes `storage`'s block (leaving `storage` empty): a pooled one is cached for reuse, a smaller
// one freed.
template <class T>
void recycle_storage(std::vector<T>& storage);

extern template std::vector<double> zeroed_storage<double>(std::size_t);
extern template std::vector<std::uint16_t> zeroed_storage<std::uint16_t>(std::size_t);
extern template void recycle_storage<double>(std::vector<double>&);
extern template void recycle_storage<std::uint16_t>(std::vector<std::uint16_t>&);

// Frees every cached block of every pool (its memory goes back to malloc, and so to the OS; on glibc malloc is
// also asked to return the free memory it keeps, malloc_trim) and restarts the
// high-water mark from the live bytes; returns the bytes freed. For a process whose start needed
// large tensors that its steps never allocate again: `dflash train` on a device backend, whose
// start holds the frozen weights, parameters and optimizer state in double on the host (39 GB a
// rank at full scale under ZeRO-1) before they go to the device. The cache is the process's: other
// reference runs in it lose their cached blocks too (speed, never values: a block is zeroed on
// reuse either way).
std::size_t release_cached_storage();

// The pools together (each one's counts summed; each keeps its own bound).
struct StoragePoolState {
  std::size_t live_bytes = 0;        // pooled blocks held by tensors
  std::size_t cached_bytes = 0;      // pooled blocks waiting for reuse
  std::size_t high_water_bytes = 0;  // the largest live_bytes so far: the bound on live + cached
  std::uint64_t reused = 0;          // zeroed_storage calls served from the cache
  std::uint64_t fresh = 0;           // pooled-size zeroed_storage calls that allocated
};
StoragePoolState storage_pool_state();

}  // namespace dflash
