// The GPU backend of the loss head's chunk loop (cuda/loss_head/chunked_head.hpp): buffers from the
// DeviceAllocator, the row kernels (row_kernels.hpp) and the loss head's cuBLAS products
// (CublasGemm), all on the allocator's stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/gemm/cublas.hpp"
#include "cuda/loss_head/row_kernels.hpp"
#include "cuda/runtime/bf16_bits.hpp"
#include "cuda/runtime/device_allocator.hpp"
#include "cuda/runtime/device_buffer.hpp"

namespace dflash {

struct CudaLossHeadBackend : DeviceMemory {
  CublasGemm& gemm;

  void compact_valid_rows(const std::uint8_t* valid, std::int64_t T, std::int32_t* list, std::int32_t* count) const {
    launch_compact_valid_rows(valid, T, list, count, stream());
  }
  void gather_rows(const Bf16Bits* src, const std::int32_t* list, std::int64_t rows, std::int64_t cols,
                   Bf16Bits* dst) const {
    launch_gather_rows(src, list, rows, cols, dst, stream());
  }
  void scatter_rows(const float* src, const std::int32_t* list, std::int64_t rows, std::int64_t cols,
                    float* dst) const {
    launch_scatter_rows(src, list, rows, cols, dst, stream());
  }
  void hybrid_row_stats(const Bf16Bits* z, const Bf16Bits* t, std::int64_t rows, std::int64_t vocab,
                        const std::int32_t* list, DeviceRowTargets targets, HybridWeights weights,
                        DeviceRowOutputs out) const {
    launch_hybrid_row_stats(z, t, rows, vocab, list, targets, weights, out, stream());
  }
  void hybrid_logit_grad(Bf16Bits* z, const Bf16Bits* t, std::int64_t rows, std::int64_t vocab,
                         const std::int32_t* list, DeviceRowTargets targets, HybridWeights weights,
                         const float* row_stats, float weight_sum) const {
    launch_hybrid_logit_grad(z, t, rows, vocab, list, targets, weights, row_stats, weight_sum, stream());
  }
  void loss_totals(const DeviceRowOutputs& rows_out, DeviceRowTargets targets, std::int64_t T,
                   LossHeadStats<double>* totals) const {
    launch_loss_totals(rows_out, targets, T, totals, stream());
  }
  void find_row_target_faults(DeviceRowTargets targets, std::int64_t T, std::int64_t vocab,
                              RowTargetFaults* faults) const {
    launch_find_row_target_faults(targets, T, vocab, faults, stream());
  }
  void find_non_finite_bf16(const Bf16Bits* x, std::int64_t rows, std::int64_t cols, const std::uint8_t* row_mask,
                            unsigned long long* first) const {
    launch_find_non_finite_bf16(x, rows, cols, row_mask, first, stream());
  }
  void logits(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* z, std::int64_t rows, std::int64_t vocab,
              std::int64_t hidden) const {
    gemm.logits(x, w, z, rows, vocab, hidden);
  }
  void logits_input_grad(const Bf16Bits* dz, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t vocab,
                         std::int64_t hidden) const {
    gemm.input_grad(dz, w, dx, rows, vocab, hidden);
  }
};

}  // namespace dflash
