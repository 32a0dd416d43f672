// Proof that a warp program reaches shared memory in its warp steps only through DFLASH_SHARED
// (cuda/exec/shared_access_observer.hpp). While a SharedMediation is active, every HostWarp::lanes
// call (harness/cuda/host_warp_exec.hpp) moves the block's shared memory into a shadow copy that
// only DFLASH_SHARED reaches (the observer `map` gives) and poisons the memory itself with NaN
// bytes; after the call the shadow is copied back. A lane that reads shared memory another way
// reads NaN, and one that writes it another way writes where nothing reads and is overwritten: the
// program's results change. Phases (exec.phase: tiles copied in, zeroing) run on the memory itself.
// run_grid_on_host (harness/cuda/host_block_exec.hpp) names each block's memory.
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

namespace dflash {

class SharedMediation {
 public:
  // The mediation in force (one at a time: the host runs one block at a time).
  static SharedMediation*& active() {
    static SharedMediation* mediation = nullptr;
    return mediation;
  }

  // A new block: its shared memory [base, base + bytes).
  void watch(unsigned char* base, std::size_t bytes) {
    base_ = base;
    bytes_ = bytes;
    shadow_.assign(bytes, 0);
  }
  void begin_step() {
    if (bytes_ == 0) return;
    std::memcpy(shadow_.data(), base_, bytes_);
    std::memset(base_, 0xFF, bytes_);
    ++steps_;
  }
  void end_step() {
    if (bytes_ != 0) std::memcpy(base_, shadow_.data(), bytes_);
  }
  // Where an announced access goes: the shadow, for an address in the block's memory.
  void* map(void* address) {
    auto* at = static_cast<unsigned char*>(address);
    if (at < base_ || at >= base_ + bytes_) return address;  // global memory
    return shadow_.data() + (at - base_);
  }
  std::size_t steps() const { return steps_; }

 private:
  unsigned char* base_ = nullptr;
  std::size_t bytes_ = 0, steps_ = 0;
  std::vector<unsigned char> shadow_;
};

}  // namespace dflash
