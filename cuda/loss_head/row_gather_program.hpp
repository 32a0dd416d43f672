// The loss head's products over the rows that carry a label only (SPEC §4: rows with w01 = 0 -
// invalid blocks, k = 0 rows - have no label and no teacher; nothing may depend on them). Forward
// lists the valid rows once, in ascending order (compact_valid_rows_program); each chunk then
// gathers up to c listed rows of Y and G into a [c, H] buffer, runs its V-wide products and row
// kernels on those compact rows, and scatters dL/dY back to the rows it came from (both
// copy_listed_row_program). Unlisted rows keep their zeros. The statistics, the loss and
// every gradient are those of the un-gathered computation, row for row: each row's arithmetic is
// unchanged, only which rows are computed.
//
// These are block programs (cuda/exec/block_program.hpp) so that tests/cuda/loss_head/test_loss_head_row_program.cpp
// runs them on the CPU over the kernels' real grids:
//   compaction  one block of kCompactThreads threads over all T rows: thread j owns the contiguous
//               rows compact_thread_rows(T, j); phase 1 counts its valid rows, phase 2 (thread 0)
//               turns the counts into offsets and the total, phase 3 writes its rows' indices.
//   gather      one block of kGatherThreads per compact row r of a chunk: dst row r <- src row
//               list[r] (thread j copies columns j, j + kGatherThreads, ...).
//   scatter     the same grid: dst row list[r] <- src row r.
// Row indices are 32-bit (T < 2^31, checked by the launchers); element offsets are 64-bit.
#pragma once

#include <cstdint>

#include "common/hd.hpp"

namespace dflash {

inline constexpr int kCompactThreads = 1024;  // one block lists all T rows
inline constexpr int kGatherThreads = 256;    // one block per compact row

struct RowRange {
  std::int64_t begin;
  std::int64_t end;
};

// Thread j's contiguous share of the T rows (ascending in j, so the list comes out ascending).
DFLASH_HD inline RowRange compact_thread_rows(std::int64_t T, int thread) {
  const std::int64_t per = (T + kCompactThreads - 1) / kCompactThreads;
  const std::int64_t begin = thread * per < T ? thread * per : T;
  return {begin, begin + per < T ? begin + per : T};
}

// Lists the rows i with valid[i] = 1 in list[0, n), ascending, and writes n to *count.
// `offsets` is the block's shared array of kCompactThreads counts.
template <class Exec>
DFLASH_HD void compact_valid_rows_program(Exec& exec, const std::uint8_t* valid, std::int64_t T, std::int32_t* offsets,
                                          std::int32_t* list, std::int32_t* count) {
  exec.phase([&](int thread) {
    const RowRange mine = compact_thread_rows(T, thread);
    std::int32_t n = 0;
    for (std::int64_t i = mine.begin; i < mine.end; ++i) n += valid[i] != 0 ? 1 : 0;
    offsets[thread] = n;
  });
  exec.phase([&](int thread) {  // an exclusive prefix sum over 1024 counts: one thread, fixed order
    if (thread != 0) return;
    std::int32_t sum = 0;
    for (int j = 0; j < kCompactThreads; ++j) {
      const std::int32_t n = offsets[j];
      offsets[j] = sum;
      sum += n;
    }
    *count = sum;
  });
  exec.phase([&](int thread) {
    const RowRange mine = compact_thread_rows(T, thread);
    std::int32_t at = offsets[thread];
    for (std::int64_t i = mine.begin; i < mine.end; ++i) {
      if (valid[i] != 0) list[at++] = static_cast<std::int32_t>(i);
    }
  });
}

// Compact row r of a chunk is global row list[r] (list: the chunk's slice of the valid rows).
DFLASH_HD inline std::int64_t global_row_of(const std::int32_t* list, std::int64_t r) { return list[r]; }

// The two directions of one copy between a chunk's compact rows and the rows they stand for.
enum class ListedRows {
  gather,   // block r: dst row r <- src row list[r] (a chunk's Y and G rows)
  scatter,  // block r: dst row list[r] <- src row r (a chunk's dL/dY)
};

// Block r of a chunk's copy, rows of `cols` elements.
template <ListedRows kDirection, class Exec, class T>
DFLASH_HD void copy_listed_row_program(Exec& exec, const T* src, const std::int32_t* list, std::int64_t r,
                                       std::int32_t cols, T* dst) {
  exec.phase([&](int thread) {
    const std::int64_t listed = global_row_of(list, r);
    const T* from = src + (kDirection == ListedRows::gather ? listed : r) * cols;
    T* to = dst + (kDirection == ListedRows::gather ? r : listed) * cols;
    for (std::int32_t c = thread; c < cols; c += kGatherThreads) to[c] = from[c];
  });
}

}  // namespace dflash
