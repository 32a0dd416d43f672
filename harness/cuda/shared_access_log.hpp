// The log of a block's shared-memory accesses that the bank-conflict tests read
// (harness/cuda/shared_bank_trace.hpp counts the conflicts): (phase, thread, step, 4-byte word),
// step s of a thread being its s-th shared access in the phase. The CUDA-core programs report to it
// through TracedStorage under SharedTraceExec; the tensor-core programs through
// cuda/exec/shared_access_observer.hpp, each HostWarp::lanes step a phase of its own
// (harness/cuda/host_warp_exec.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dflash {

inline constexpr int kSharedBanks = 32;
inline constexpr std::size_t kSharedBankBytes = 4;

struct SharedAccess {
  int phase;
  int thread;
  std::int64_t step;
  std::size_t word;  // byte offset in the block's shared memory / 4
};

class SharedAccessLog {
 public:
  // The log the traced accesses go to (one at a time: the host runs one block at a time).
  static SharedAccessLog*& active() {
    static SharedAccessLog* log = nullptr;
    return log;
  }

  // A new block: its shared memory [base, base + bytes); forgets the previous block's accesses.
  void watch(const unsigned char* base, std::size_t bytes) {
    base_ = base;
    bytes_ = bytes;
    phase_ = -1;
    thread_ = -1;
    step_ = 0;
    unattributed_ = 0;
    accesses_.clear();
  }
  void begin_phase() { ++phase_; }
  void begin_thread(int thread) {
    thread_ = thread;
    step_ = 0;
  }
  // No thread runs until the next begin_thread (a warp step has ended).
  void end_threads() { thread_ = -1; }
  void note(const void* address) {
    const auto* at = static_cast<const unsigned char*>(address);
    if (at < base_ || at >= base_ + bytes_) return;  // global memory
    if (thread_ < 0) {  // outside any thread the executor announced: it cannot be paired into a warp access
      ++unattributed_;
      return;
    }
    accesses_.push_back({phase_, thread_, step_++, static_cast<std::size_t>(at - base_) / kSharedBankBytes});
  }
  const std::vector<SharedAccess>& accesses() const { return accesses_; }
  // Shared accesses reported while no thread ran (a test fails on any).
  std::int64_t unattributed() const { return unattributed_; }

 private:
  const unsigned char* base_ = nullptr;
  std::size_t bytes_ = 0;
  int phase_ = -1, thread_ = -1;
  std::int64_t step_ = 0, unattributed_ = 0;
  std::vector<SharedAccess> accesses_;
};

inline void note_shared_access(const void* address) {
  if (SharedAccessLog* log = SharedAccessLog::active()) log->note(address);
}

}  // namespace dflash
