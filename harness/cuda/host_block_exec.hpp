// The CPU executor of cuda/exec/block_program.hpp: runs a thread block's program with every thread of
// each phase in turn (optionally in reverse order: a phase whose threads depend on each other
// then gives different bits), over the kernel's real grid, with shared memory poisoned with NaN
// bytes so that a read of anything no phase wrote shows up in the results. It records the hooks:
// which tiles each block visited and every dropout draw.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/cuda/shared_mediation.hpp"

namespace dflash {

struct DropoutDrawRecord {
  std::uint64_t element;
  bool kept;
  bool operator<(const DropoutDrawRecord& o) const {
    return element != o.element ? element < o.element : kept < o.kept;
  }
  bool operator==(const DropoutDrawRecord& o) const = default;
};

class HostBlockExec {
 public:
  HostBlockExec(int threads, bool reverse) : threads_(threads), reverse_(reverse) {}

  int threads() const { return threads_; }
  template <class Phase>
  void phase(Phase&& body) {
    for (int i = 0; i < threads_; ++i) body(reverse_ ? threads_ - 1 - i : i);
  }
  void visit(std::int64_t id) { visited.push_back(id); }
  void drew(std::uint64_t element, float factor) { draws.push_back({element, factor != 0.0f}); }

  std::vector<std::int64_t> visited;
  std::vector<DropoutDrawRecord> draws;

 private:
  int threads_;
  bool reverse_;
};

struct HostGridRun {
  std::vector<std::vector<std::int64_t>> visited;  // per grid block
  std::vector<DropoutDrawRecord> draws;            // all blocks, in execution order
};

// Runs program(exec, shared, block) for every block of the grid, in order (Exec: HostBlockExec, or
// HostWarpExec for warp programs).
template <class Exec = HostBlockExec, class Program>
HostGridRun run_grid_on_host(std::int64_t blocks, std::size_t shared_bytes, int threads, bool reverse,
                             Program program) {
  HostGridRun run;
  std::vector<unsigned char> shared(shared_bytes + 16);
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::fill(shared.begin(), shared.end(), 0xFF);  // every float a NaN, every bf16 a NaN
    if (SharedMediation* m = SharedMediation::active()) m->watch(shared.data(), shared_bytes);
    Exec exec(threads, reverse);
    program(exec, shared.data(), b);
    run.visited.push_back(std::move(exec.visited));
    run.draws.insert(run.draws.end(), exec.draws.begin(), exec.draws.end());
  }
  return run;
}

}  // namespace dflash
