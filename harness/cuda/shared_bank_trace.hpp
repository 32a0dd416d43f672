// Shared-memory bank conflicts of a block program, measured on the host. The program runs under
// SharedTraceExec (HostBlockExec's phases, every thread in turn) on TracedStorage: a Storage type
// of the same size as fp32 or bf16 bits whose reads (widen), writes (narrow_into) and copies
// report their address. SharedAccessLog keeps those that fall in the block's shared memory as
// (phase, thread, step, 4-byte word): step s of a thread is its s-th shared access in the phase.
// On the GPU a warp's 32 lanes issue their s-th access together where their control flow is the
// same, so bank_ways groups the accesses by (phase, warp, step) and counts, per bank (word mod 32),
// the distinct words: the conflict degree, 1 when conflict-free (lanes reading the same word are
// served by one broadcast). lanes_in_lockstep says whether that pairing holds: every lane of a
// warp made the same number of accesses in each phase (choose shapes where it does).
//
// The CUDA-core programs' fp32 scratch (scores, f P, dS, accumulators, row statistics) is plain
// float: its accesses are announced through DFLASH_SHARED (cuda/exec/shared_access_observer.hpp),
// which a TraceScope (harness/cuda/shared_observer_scope.hpp) notes in the same log; the phase
// helpers they share with the tensor-core programs (load_row_stats, begin_query_tile_backward,
// store_context_key_grads) are not announced: in the CUDA-core programs a thread per consecutive
// element; the tensor-core dkv's store reads its accumulator rows ld_acc = d + 4 apart, 2-way at
// d 16, 48, 80 and 112, untraced. The tensor-core
// programs, on raw bf16 bits and floats, report each warp step's accesses through DFLASH_SHARED
// alone (under HostWarpExec: every HostWarp::lanes call a phase).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/storage.hpp"
#include "cuda/exec/mma_fragments.hpp"
#include "harness/cuda/host_block_exec.hpp"
#include "harness/cuda/shared_access_log.hpp"

namespace dflash {

// fp32 (Raw = float) or bf16 bits (Raw = std::uint16_t) that report every access. In a namespace
// of its own: argument-dependent lookup from the programs' unqualified calls then finds its widen
// and narrow_into, and not dflash's other templates (reference/linalg.hpp's dot<Real>).
namespace traced {

template <class Raw>
struct TracedStorage {
  Raw raw;

  TracedStorage() = default;
  TracedStorage(const TracedStorage&) = default;
  TracedStorage& operator=(const TracedStorage& other) {
    note_shared_access(&other);
    note_shared_access(this);
    raw = other.raw;
    return *this;
  }
};
static_assert(sizeof(TracedStorage<float>) == 4 && sizeof(TracedStorage<std::uint16_t>) == 2);

template <class Raw>
float widen(const TracedStorage<Raw>& value) {
  note_shared_access(&value);
  return dflash::widen(value.raw);
}
template <class Raw>
void narrow_into(float value, TracedStorage<Raw>& out) {
  note_shared_access(&out);
  dflash::narrow_into(value, out.raw);
}

}  // namespace traced
using traced::TracedStorage;

// HostBlockExec whose phases tell the active log which phase and thread is running.
class SharedTraceExec : public HostBlockExec {
 public:
  SharedTraceExec(int threads, bool reverse) : HostBlockExec(threads, reverse) {}

  template <class Phase>
  void phase(Phase&& body) {
    SharedAccessLog& log = *SharedAccessLog::active();
    log.begin_phase();
    for (int t = 0; t < threads(); ++t) {
      log.begin_thread(t);
      body(t);
    }
    log.end_threads();
  }
};

// The worst conflict of a set of accesses: its degree and where it happens.
struct BankWays {
  int ways = 0;  // 0: no access at all
  int phase = -1, warp = -1;
  std::int64_t step = -1;
};

inline BankWays bank_ways(std::vector<SharedAccess> accesses) {
  const auto group_less = [](const SharedAccess& a, const SharedAccess& b) {
    const int wa = a.thread / kWarpLanes, wb = b.thread / kWarpLanes;
    if (a.phase != b.phase) return a.phase < b.phase;
    if (wa != wb) return wa < wb;
    if (a.step != b.step) return a.step < b.step;
    return a.word < b.word;
  };
  std::sort(accesses.begin(), accesses.end(), group_less);
  BankWays worst;
  for (std::size_t begin = 0; begin < accesses.size();) {
    const SharedAccess& first = accesses[begin];
    std::size_t end = begin;
    int words_in_bank[kSharedBanks] = {};
    for (; end < accesses.size(); ++end) {  // one (phase, warp, step): distinct words ascending
      const SharedAccess& a = accesses[end];
      if (a.phase != first.phase || a.thread / kWarpLanes != first.thread / kWarpLanes || a.step != first.step) break;
      if (end == begin || a.word != accesses[end - 1].word) ++words_in_bank[a.word % kSharedBanks];
    }
    for (int bank = 0; bank < kSharedBanks; ++bank) {
      if (words_in_bank[bank] > worst.ways) {
        worst = BankWays{words_in_bank[bank], first.phase, first.thread / kWarpLanes, first.step};
      }
    }
    begin = end;
  }
  return worst;
}

// A shared region of a program's layout, as byte offsets [first, last) in the block's memory.
struct SharedRegion {
  const char* name;
  std::size_t first, last;
};
// The region `name` of `count` elements at `at`, in the block memory that starts at `base`.
template <class T>
SharedRegion region(const char* name, const unsigned char* base, const T* at, std::int64_t count) {
  const auto first = static_cast<std::size_t>(reinterpret_cast<const unsigned char*>(at) - base);
  return {name, first, first + static_cast<std::size_t>(count) * sizeof(T)};
}

// Adds to `seen` (kept sorted, no repeats) the name of every region of `layout` that an access of
// `accesses` falls in: a test then asks for every region its program uses, so that an access
// that bypasses the trace - a whole region of them - shows.
inline void note_regions_seen(const std::vector<SharedAccess>& accesses, const std::vector<SharedRegion>& layout,
                              std::vector<std::string>& seen) {
  for (const SharedRegion& r : layout) {
    if (std::find(seen.begin(), seen.end(), r.name) != seen.end()) continue;
    for (const SharedAccess& a : accesses) {
      const std::size_t byte = a.word * kSharedBankBytes;
      if (byte >= r.first && byte < r.last) {
        seen.insert(std::upper_bound(seen.begin(), seen.end(), std::string(r.name)), r.name);
        break;
      }
    }
  }
}

// Did every lane of each warp make the same number of accesses in each phase (the condition under
// which step s of every lane is one instruction)?
inline bool lanes_in_lockstep(const std::vector<SharedAccess>& accesses, int threads) {
  std::map<int, std::vector<std::int64_t>> counts;  // phase -> accesses per thread
  for (const SharedAccess& a : accesses) {
    std::vector<std::int64_t>& c = counts[a.phase];
    c.resize(static_cast<std::size_t>(threads), 0);
    ++c[static_cast<std::size_t>(a.thread)];
  }
  for (const auto& [phase, c] : counts) {
    for (std::size_t t = 0; t < c.size(); ++t) {
      if (c[t] != c[t / kWarpLanes * kWarpLanes]) return false;
    }
  }
  return true;
}

}  // namespace dflash
