// The optimizer kernels' programs (cuda/optimizer/adamw_program.hpp) on the host over the grids and
// threads their launchers use (harness/cuda/host_block_exec.hpp), threads in reverse order if asked:
// what the CPU tests of the programs and the CPU's training backend
// (harness/cuda/host_training_backend.hpp) run in place of the kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/optimizer/adamw_program.hpp"
#include "harness/cuda/host_block_exec.hpp"

namespace dflash {

// Both passes of the squared norm of g[0, n): partials[norm_blocks(n)], then *out.
inline void squared_norm_on_host(const float* g, std::int64_t n, double* partials, double* out, bool reverse = false) {
  const std::int64_t blocks = norm_blocks(n);
  run_grid_on_host(blocks, kOptimizerThreads * sizeof(double), kOptimizerThreads, reverse,
                   [&](HostBlockExec& exec, unsigned char* shared, std::int64_t block) {
                     squared_norm_block_program(exec, reinterpret_cast<double*>(shared), g, n, blocks, block, partials);
                   });
  *out = squared_norm_of_partials(partials, blocks);
}

inline double squared_norm_on_host(const std::vector<float>& g, bool reverse) {
  std::vector<double> partials(static_cast<std::size_t>(kNormMaxBlocks), std::nan(""));
  double out = std::nan("");
  squared_norm_on_host(g.data(), std::int64_t(g.size()), partials.data(), &out, reverse);
  return out;
}

// element(i) for i < n, as elementwise_block_program's grid gives them out.
template <class Element>
void elementwise_on_host(std::int64_t n, bool reverse, Element element) {
  const std::int64_t blocks = elementwise_blocks(n);
  run_grid_on_host(blocks, 0, kOptimizerThreads, reverse, [&](HostBlockExec& exec, unsigned char*, std::int64_t block) {
    elementwise_block_program(exec, n, blocks, block, element);
  });
}

}  // namespace dflash
