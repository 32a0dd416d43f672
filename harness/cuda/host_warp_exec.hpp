// The CPU executor of warp programs (cuda/README.md, "Warp programs"): HostBlockExec's phases
// plus every lane's registers and the warp-collective steps, over the kernel's real grid and
// thread partition. A lane's registers are one struct per thread of the block, poisoned with NaN
// bytes (a read of a register nothing wrote shows up in the results). warp_phase runs the body
// once per warp (optionally in reverse warp order: warps share nothing between barriers, so the
// order must not change any bit); inside it
//   lanes(body)            body(lane, registers) for the warp's 32 lanes (reversible too)
//   mma(select)            the tensor-core instruction, emulated: the 32 lanes' fragments
//                          gathered into A[16x16], B[16x8], C[16x8] through the PTX maps
//                          (cuda/exec/mma_fragments.hpp), D = C + A B with each dot product summed
//                          in fp32 over k ascending (bf16 x bf16 products are exact in fp32),
//                          scattered back
//   exchange(mask, v, f)   shfl_xor: every lane reads value v of lane ^ mask (all reads before
//                          any write), then f(registers, that value)
// The device's tensor cores sum each dot product in an unspecified order and internal precision,
// so host and device agree within the fp32 rule, not bitwise; everything else (masks, dropout
// coordinates, the data each lane moves) is the same code on both.
#pragma once

#include <cstring>
#include <type_traits>
#include <vector>

#include "common/storage.hpp"
#include "cuda/exec/mma_fragments.hpp"
#include "harness/cuda/host_block_exec.hpp"
#include "harness/cuda/shared_access_log.hpp"
#include "harness/cuda/shared_mediation.hpp"

namespace dflash {

// D = C + A B for one warp, given each lane's operands.
inline void emulate_warp_mma(const MmaOperands (&lane)[kWarpLanes]) {
  float a[kMmaM][kMmaK], b[kMmaK][kMmaN], c[kMmaM][kMmaN];
  for (int l = 0; l < kWarpLanes; ++l) {
    for (int i = 0; i < kMmaAElements; ++i) {
      const FragmentCoord at = mma_a_coord(l, i);
      a[at.row][at.col] = widen(fragment_element(lane[l].a, i));
    }
    for (int i = 0; i < kMmaBElements; ++i) {
      const FragmentCoord at = mma_b_coord(l, i);
      b[at.row][at.col] = widen(fragment_element(lane[l].b, i));
    }
    for (int i = 0; i < kMmaCElements; ++i) {
      const FragmentCoord at = mma_c_coord(l, i);
      c[at.row][at.col] = lane[l].c[i];
    }
  }
  for (int m = 0; m < kMmaM; ++m) {
    for (int n = 0; n < kMmaN; ++n) {
      float sum = c[m][n];
      for (int k = 0; k < kMmaK; ++k) sum += a[m][k] * b[k][n];
      c[m][n] = sum;
    }
  }
  for (int l = 0; l < kWarpLanes; ++l) {
    for (int i = 0; i < kMmaCElements; ++i) {
      const FragmentCoord at = mma_c_coord(l, i);
      lane[l].c[i] = c[at.row][at.col];
    }
  }
}

template <class Registers>
class HostWarp {
 public:
  HostWarp(std::vector<Registers>& regs, int warp, bool reverse) : regs_(regs), warp_(warp), reverse_(reverse) {}

  int index() const { return warp_; }
  // Under a bank-conflict test's log (harness/cuda/shared_access_log.hpp) each call is a phase and
  // each lane a thread of it, so that step s of every lane is one warp-wide access.
  // Under a SharedMediation (harness/cuda/shared_mediation.hpp) each call moves the block's shared
  // memory to where only DFLASH_SHARED reaches it, and back.
  template <class Body>
  void lanes(Body&& body) {
    SharedAccessLog* const log = SharedAccessLog::active();
    SharedMediation* const mediation = SharedMediation::active();
    if (log != nullptr) log->begin_phase();
    if (mediation != nullptr) mediation->begin_step();
    for (int i = 0; i < kWarpLanes; ++i) {
      const int l = reverse_ ? kWarpLanes - 1 - i : i;
      if (log != nullptr) log->begin_thread(warp_ * kWarpLanes + l);
      body(l, lane(l));
    }
    if (mediation != nullptr) mediation->end_step();
    if (log != nullptr) log->end_threads();  // a phase body's access after it would not be a lane's
  }
  template <class Select>
  void mma(Select&& select) {
    MmaOperands ops[kWarpLanes];
    for (int l = 0; l < kWarpLanes; ++l) ops[l] = select(lane(l));
    emulate_warp_mma(ops);
  }
  template <class Value, class Combine>
  void exchange(int lane_mask, Value&& value, Combine&& combine) {
    float read[kWarpLanes];
    for (int l = 0; l < kWarpLanes; ++l) read[l] = value(lane(l ^ lane_mask));
    for (int l = 0; l < kWarpLanes; ++l) combine(lane(l), read[l]);
  }

 private:
  Registers& lane(int l) { return regs_[static_cast<std::size_t>(warp_ * kWarpLanes + l)]; }
  std::vector<Registers>& regs_;
  int warp_;
  bool reverse_;
};

class HostWarpExec : public HostBlockExec {
 public:
  HostWarpExec(int threads, bool reverse) : HostBlockExec(threads, reverse), reverse_(reverse) {}

  template <class Registers>
  std::vector<Registers> lane_registers() const {
    static_assert(std::is_trivially_copyable_v<Registers>);
    std::vector<Registers> regs(static_cast<std::size_t>(threads()));
    std::memset(static_cast<void*>(regs.data()), 0xFF, regs.size() * sizeof(Registers));
    return regs;
  }
  template <class Registers, class Body>
  void warp_phase(std::vector<Registers>& regs, Body&& body) {
    const int warps = threads() / kWarpLanes;
    for (int i = 0; i < warps; ++i) {
      HostWarp<Registers> warp(regs, reverse_ ? warps - 1 - i : i, reverse_);
      body(warp);
    }
  }

 private:
  bool reverse_;
};

}  // namespace dflash
