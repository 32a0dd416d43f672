// The CPU backend of the loss head's chunk loop (cuda/loss_head/chunked_head.hpp): the row kernels'
// block programs (cuda/loss_head/row_program.hpp, row_gather_program.hpp) run by host loops over
// the kernels' grids (harness/cuda/host_block_exec.hpp), the input checks' per-element rules in
// one ascending pass, and the two products as the plain fp32 sums of bf16 operands in index order
// that HostBackend's linear layers are (the computation cuBLAS is held to). Buffers are counted
// by a MemoryTracker as the device allocator counts them, and start as NaN bytes, as device
// memory is not initialised: a read of a value no pass wrote shows up in the results.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/loss_head/row_gather_program.hpp"
#include "cuda/loss_head/row_program.hpp"
#include "cuda/runtime/bf16_bits.hpp"
#include "harness/cuda/host_backend.hpp"
#include "harness/cuda/host_block_exec.hpp"

namespace dflash {

struct HostLossHeadBackend : HostMemory {
  // Each block's threads in descending order: a phase whose threads depend on one another then
  // gives other bits.
  bool reverse_threads = false;

  void compact_valid_rows(const std::uint8_t* valid, std::int64_t T, std::int32_t* list, std::int32_t* count) const {
    run_grid_on_host(1, kCompactThreads * sizeof(std::int32_t), kCompactThreads, reverse_threads,
                     [&](HostBlockExec& exec, unsigned char* shared, std::int64_t) {
                       compact_valid_rows_program(exec, valid, T, reinterpret_cast<std::int32_t*>(shared), list, count);
                     });
  }
  void gather_rows(const Bf16Bits* src, const std::int32_t* list, std::int64_t rows, std::int64_t cols,
                   Bf16Bits* dst) const {
    run_grid_on_host(
        rows, 0, kGatherThreads, reverse_threads, [&](HostBlockExec& exec, unsigned char*, std::int64_t r) {
          copy_listed_row_program<ListedRows::gather>(exec, src, list, r, static_cast<std::int32_t>(cols), dst);
        });
  }
  void scatter_rows(const float* src, const std::int32_t* list, std::int64_t rows, std::int64_t cols,
                    float* dst) const {
    run_grid_on_host(
        rows, 0, kGatherThreads, reverse_threads, [&](HostBlockExec& exec, unsigned char*, std::int64_t r) {
          copy_listed_row_program<ListedRows::scatter>(exec, src, list, r, static_cast<std::int32_t>(cols), dst);
        });
  }
  void hybrid_row_stats(const Bf16Bits* z, const Bf16Bits* t, std::int64_t rows, std::int64_t vocab,
                        const std::int32_t* list, DeviceRowTargets targets, HybridWeights weights,
                        DeviceRowOutputs out) const {
    const bool vector = rows_take_vector_path(z, t, vocab);
    run_grid_on_host(rows, kRowThreads * sizeof(KernelRowStats), kRowThreads, reverse_threads,
                     [&](HostBlockExec& exec, unsigned char* shared, std::int64_t r) {
                       hybrid_row_stats_program(exec, z, t, static_cast<std::int32_t>(vocab), list, targets, weights,
                                                out, vector, reinterpret_cast<KernelRowStats*>(shared), r);
                     });
  }
  void hybrid_logit_grad(Bf16Bits* z, const Bf16Bits* t, std::int64_t rows, std::int64_t vocab,
                         const std::int32_t* list, DeviceRowTargets targets, HybridWeights weights,
                         const float* row_stats, float weight_sum) const {
    const bool vector = rows_take_vector_path(z, t, vocab);
    run_grid_on_host(rows, 0, kRowThreads, reverse_threads, [&](HostBlockExec& exec, unsigned char*, std::int64_t r) {
      hybrid_logit_grad_program(exec, z, t, static_cast<std::int32_t>(vocab), list, targets, weights, row_stats,
                                weight_sum, vector, r);
    });
  }
  void loss_totals(const DeviceRowOutputs& rows_out, DeviceRowTargets targets, std::int64_t T,
                   LossHeadStats<double>* totals) const {
    run_grid_on_host(1, kTotalsThreads * sizeof(LossHeadStats<double>), kTotalsThreads, reverse_threads,
                     [&](HostBlockExec& exec, unsigned char* shared, std::int64_t) {
                       loss_totals_program(exec, rows_out, targets, T, reinterpret_cast<LossHeadStats<double>*>(shared),
                                           totals);
                     });
  }
  // The lowest row of each kind: the first seen in ascending order.
  void find_row_target_faults(DeviceRowTargets targets, std::int64_t T, std::int64_t vocab,
                              RowTargetFaults* faults) const {
    const auto lowest = [](unsigned long long& slot, bool fault, std::int64_t i) {
      if (fault) slot = std::min(slot, static_cast<unsigned long long>(i));
    };
    for (std::int64_t i = 0; i < T; ++i) {
      const RowTargetFlags f = row_target_faults_of(targets, i, vocab);
      lowest(faults->valid_not_01, f.valid_not_01, i);
      lowest(faults->bad_weight, f.bad_weight, i);
      lowest(faults->weight_on_invalid, f.weight_on_invalid, i);
      lowest(faults->label_out_of_range, f.label_out_of_range, i);
      lowest(faults->positive_weight, f.positive_weight, i);
    }
  }
  void find_non_finite_bf16(const Bf16Bits* x, std::int64_t rows, std::int64_t cols, const std::uint8_t* row_mask,
                            unsigned long long* first) const {
    for (std::int64_t e = 0; e < rows * cols; ++e) {
      if (row_mask != nullptr && row_mask[e / cols] == 0) continue;
      if (bf16_bits_non_finite(x[e])) {
        *first = std::min(*first, static_cast<unsigned long long>(e));
        return;
      }
    }
  }
  // z[r, v] = sum_h x[r, h] w[v, h]
  void logits(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* z, std::int64_t rows, std::int64_t vocab,
              std::int64_t hidden) const {
    products().linear_forward(x, w, z, rows, vocab, hidden);
  }
  // dx[r, h] = sum_v dz[r, v] w[v, h]
  void logits_input_grad(const Bf16Bits* dz, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t vocab,
                         std::int64_t hidden) const {
    products().linear_input_grad(dz, w, dx, rows, vocab, hidden, false);
  }

 private:
  HostBackend<Bf16Bits> products() const { return HostBackend<Bf16Bits>{tracker}; }
};

}  // namespace dflash
