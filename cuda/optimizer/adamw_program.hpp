// The CUDA optimizer step's programs (TRAINING §12, fp32 master): the squared norm of the fp32
// gradient, the AdamW update of the fp32 master weights and moments, and the cast of the updated
// master into the bf16 working copy. Written once as DFLASH_HD block programs
// (cuda/exec/block_program.hpp) that the kernels (cuda/optimizer/adamw_kernels.cu) run on the device and the
// CPU tests run on the host over the same grid and threads. The per-element arithmetic is
// common/adamw.hpp's, shared with the double reference.
#pragma once

#include <cstdint>

#include "common/adamw.hpp"
#include "common/bf16.hpp"
#include "common/hd.hpp"

namespace dflash {

// Threads per block of every optimizer kernel (a power of two: the norm's shared-memory tree).
inline constexpr int kOptimizerThreads = 256;
// At most this many blocks sum partial norms: the second pass reads this many doubles.
inline constexpr std::int64_t kNormMaxBlocks = 1024;
// At most this many blocks walk the flat vector in the elementwise kernels (grid-stride beyond).
inline constexpr std::int64_t kOptimizerMaxBlocks = 65535;

// ---- squared norm: a fixed two-level tree, deterministic for a given n ----

// Blocks of the norm's first pass over n elements: a function of n only, so the tree is too.
DFLASH_HD inline std::int64_t norm_blocks(std::int64_t n) {
  const std::int64_t blocks = (n + kOptimizerThreads - 1) / kOptimizerThreads;
  return blocks < 1 ? 1 : (blocks > kNormMaxBlocks ? kNormMaxBlocks : blocks);
}

struct IndexRange {
  std::int64_t begin, end;
};

// The contiguous elements thread `thread` of block `block` sums: the blocks split [0, n) into
// equal contiguous chunks, each block's threads split its chunk the same way (the last ones
// shorter or empty).
DFLASH_HD inline IndexRange norm_thread_range(std::int64_t n, std::int64_t blocks, int threads, std::int64_t block,
                                              int thread) {
  const std::int64_t chunk = (n + blocks - 1) / blocks;
  const std::int64_t block_begin = block * chunk < n ? block * chunk : n;
  const std::int64_t block_end = block_begin + chunk < n ? block_begin + chunk : n;
  const std::int64_t per_thread = (chunk + threads - 1) / threads;
  const std::int64_t begin = block_begin + thread * per_thread;
  const std::int64_t end = begin + per_thread;
  return {begin < block_end ? begin : block_end, end < block_end ? end : block_end};
}

// First pass, block `block`: each thread sums g^2 over its range in ascending order (in double),
// then a pairwise tree over `shared` (exec.threads() doubles) in fixed pairs; partials[block] is
// the block's sum.
template <class Exec>
DFLASH_HD void squared_norm_block_program(Exec& exec, double* shared, const float* g, std::int64_t n,
                                          std::int64_t blocks, std::int64_t block, double* partials) {
  const int threads = exec.threads();
  exec.phase([&](int t) {
    const IndexRange r = norm_thread_range(n, blocks, threads, block, t);
    double sum = 0;
    for (std::int64_t e = r.begin; e < r.end; ++e) sum += double(g[e]) * double(g[e]);
    shared[t] = sum;
  });
  for (int half = threads / 2; half > 0; half /= 2) {
    exec.phase([&](int t) {
      if (t < half) shared[t] += shared[t + half];
    });
  }
  exec.phase([&](int t) {
    if (t == 0) partials[block] = shared[0];
  });
}

// Second pass: the partials in block order.
DFLASH_HD inline double squared_norm_of_partials(const double* partials, std::int64_t blocks) {
  double sum = 0;
  for (std::int64_t b = 0; b < blocks; ++b) sum += partials[b];
  return sum;
}

// ---- AdamW over a range of the flat vector ----

// Which flat elements decay (§12: matrices, never norm weights), as the flat layout's tensors:
// tensor i covers [ends[i-1], ends[i]) (ends[-1] = 0) and decays when decay[i] != 0. Built from
// FlatLayout::tensors() by the caller.
struct DecayTable {
  const std::int64_t* ends = nullptr;
  const unsigned char* decay = nullptr;
  int count = 0;
};

// Whether flat element e decays: the first tensor whose end is past e (binary search).
DFLASH_HD inline bool decays_at(const DecayTable& table, std::int64_t e) {
  int lo = 0, hi = table.count;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (table.ends[mid] <= e)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < table.count && table.decay[lo] != 0;
}

// The step's arguments: elements [begin, end) of the flat vector, held at [0, end - begin) of
// theta, m, v, g (a ZeRO-1 shard or the whole vector); clip scales the gradient (common/adamw.hpp
// clip_coefficient); `decayed` / `plain` are adamw_scalars with decay true / false.
struct AdamWRange {
  float* theta;
  float* m;
  float* v;
  const float* g;
  std::int64_t begin, end;
  double clip;
  AdamWScalars decayed, plain;
  DecayTable table;
};

// Element e (flat index begin + i): the gradient scaled in double and rounded once, then
// common/adamw.hpp's update in fp32.
DFLASH_HD inline void adamw_step_at(std::int64_t i, const AdamWRange& a) {
  const float g = float(double(a.g[i]) * a.clip);
  const AdamWScalars& s = decays_at(a.table, a.begin + i) ? a.decayed : a.plain;
  adamw_update<float>(a.theta[i], a.m[i], a.v[i], g, s);
}

// Elements a block-stride loop gives thread t of block b in a grid of `blocks` (one phase: no
// thread reads another's element).
template <class Exec, class Element>
DFLASH_HD void elementwise_block_program(Exec& exec, std::int64_t n, std::int64_t blocks, std::int64_t block,
                                         Element element) {
  const int threads = exec.threads();
  exec.phase([&](int t) {
    for (std::int64_t i = block * threads + t; i < n; i += blocks * threads) element(i);
  });
}

DFLASH_HD inline std::int64_t elementwise_blocks(std::int64_t n) {
  const std::int64_t blocks = (n + kOptimizerThreads - 1) / kOptimizerThreads;
  return blocks < 1 ? 1 : (blocks > kOptimizerMaxBlocks ? kOptimizerMaxBlocks : blocks);
}

// ---- the bf16 working copy ----

// working[i] = bf16 rounding (nearest, ties to even) of master[i].
DFLASH_HD inline void bf16_copy_at(std::int64_t i, const float* master, std::uint16_t* working) {
  working[i] = bf16_bits_from_float(master[i]);
}

}  // namespace dflash
