// The production loss head (SPEC §5, §7) on the GPU: bf16 inputs, cuBLAS products with fp32
// accumulation, fp32 row statistics, never a [T, V] tensor except under `materialize`.
//
// Only the valid rows (valid_i = 1; SPEC §4: the others carry no label, no teacher and no weight)
// are computed: forward lists them once (loss_head_row_gather.hpp), and each chunk is up to c of
// them, its Y and G rows gathered into a [c, H] buffer. Per chunk: student logits z = Y_c W^T and
// teacher logits t = G_c W^T (bf16, [c, V] each), one statistics pass over both
// (loss_head_kernels.hpp), and when the gradient is wanted one pass turning z into dL/dz in place,
// then dL/dY_c = dz W (fp32), scattered back to the chunk's rows. Invalid rows' outputs and dL/dY
// are exact zeros. GEMM passes per forward + backward, each over the n valid rows:
// chunk_grad_in_forward 3 (z, t, dY), chunk_recompute 5 (z, t; z, t, dY again in backward),
// materialize 3.
//
// What each policy holds on the device does not depend on n: planner/loss_head_memory.hpp,
// cuda_loss_head_memory, lists it byte for byte per category (tests/cuda/drafter/test_cuda_memory_plan_gpu.cpp
// measures it); besides it only the cuBLAS workspace (CublasGemm, for the loss head's lifetime) and
// a few bytes of input checks, the valid-row count and totals. Y, G, W_lm and the per-row targets
// are the caller's.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cuda/gemm/cublas.hpp"
#include "cuda/loss_head/row_kernels.hpp"
#include "cuda/runtime/bf16_bits.hpp"
#include "cuda/runtime/device_allocator.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "reference/loss_head_types.hpp"

namespace dflash {

struct CudaLossHeadShape {
  std::int64_t rows = 0;    // T
  std::int64_t hidden = 0;  // H
  std::int64_t vocab = 0;   // V
};

// Everything the loss head reads besides Y, on the device. All of it must outlive backward.
// Rows with valid = 0 carry no label and no teacher: their label and teacher row are never read.
struct CudaLossHeadTargets {
  const Bf16Bits* teacher_hidden = nullptr;  // [T,H], row i = G[a_n + k - 1]
  const Bf16Bits* lm_head = nullptr;         // W_lm [V,H], for the student and the teacher
  DeviceRowTargets rows;                     // labels [T], weights [T] (fp32), valid [T]
};

// What forward keeps for backward; which members are set depends on the policy.
struct CudaLossHeadSaved {
  LossPolicy policy = LossPolicy::chunk_recompute;
  CudaLossHeadShape shape;
  std::int64_t chunk_rows = 1;
  double weight_sum = 0;
  std::optional<DeviceBuffer<Bf16Bits>> hidden;          // chunk_recompute: a copy of Y [T,H]
  std::optional<DeviceBuffer<Bf16Bits>> logits;          // materialize: z [T,V]
  std::optional<DeviceBuffer<Bf16Bits>> teacher_logits;  // materialize: t [T,V]
  std::optional<DeviceBuffer<float>> row_stats;          // [T,3] lse(z), lse(z/tau), lse(t/tau)
  std::optional<DeviceBuffer<float>> hidden_grad;        // chunk_grad_in_forward: dL/dY [T,H]
  std::optional<DeviceBuffer<std::int32_t>> valid_list;  // chunk_recompute, materialize: the valid rows [T]
  std::int64_t valid_rows = 0;                           // ... their number n (list[0, n))
};

struct CudaLossHeadForward {
  LossHeadStats<double> stats;     // loss, ce, kl already divided by W; correct, valid_rows
  DeviceBuffer<float> lse;         // [T] logsumexp(z) where valid, else 0
  DeviceBuffer<float> token_loss;  // [T] l_i where valid, else 0
  CudaLossHeadSaved saved;
  // [T] 1 where valid and argmax z = y (the row kernel's own flag, lowest index on ties), else 0:
  // for the block statistics (TRAINING §17). Downloaded with the totals: T bytes on the host.
  std::vector<std::uint8_t> hits;
};

// The host-side checks every entry point runs first (no device needed): options (the reference's
// rules), the policies this path implements (not chunk_retain, the memory trap; no dL/dW_lm: the
// head is frozen), shape and W. Throws InputError naming the argument and the value.
void validate_cuda_loss_head(const LossHeadOptions& options, const CudaLossHeadShape& shape, double weight_sum);

class CudaLossHead {
 public:
  CudaLossHead(DeviceAllocator& allocator, const LossHeadOptions& options);

  // `hidden` is Y [T,H] (bf16, on the device); W is the GLOBAL weight sum (SPEC §5), computed
  // before the loss head so that ranks can share it. Checks the per-row targets and the
  // finiteness of Y, G (valid rows) and W_lm on the device; bad input throws InputError naming
  // the element. Y is not read after this returns.
  CudaLossHeadForward forward(const Bf16Bits* hidden, const CudaLossHeadShape& shape, const CudaLossHeadTargets& in,
                              double weight_sum);

  // dL/dY [T,H] in fp32 (MemoryCategory::gradients). Consumes what forward saved; nothing of it
  // outlives this call. `in` must be the targets forward saw.
  //
  // Stream contract: backward only enqueues its work on allocator().stream() and returns before
  // that work has run. Until it has, G, W_lm and the per-row targets are still being read and the
  // returned dL/dY is still being written: use dL/dY by later work on the same stream (stream
  // order makes that safe), and before the caller frees or overwrites any of `in` from the host or
  // another stream, wait with allocator().synchronize() (or an event recorded on the stream).
  // forward, by contrast, returns with all its work finished (it reads the totals back).
  DeviceBuffer<float> backward(const CudaLossHeadTargets& in, CudaLossHeadSaved saved);

  const LossHeadOptions& options() const { return options_; }
  DeviceAllocator& allocator() const { return allocator_; }

 private:
  void check_inputs(const Bf16Bits* hidden, const CudaLossHeadShape& shape, const CudaLossHeadTargets& in,
                    double weight_sum);
  HybridWeights hybrid_weights() const;
  // Lists the valid rows in list[0, n) and returns n (one 4-byte read back).
  std::int64_t list_valid_rows(const std::uint8_t* valid, std::int64_t T, std::int32_t* list);
  // A chunk of rows list[0, rows): gathers their Y and G rows into rows_buffer, then z, t = those W^T.
  void chunk_logits(const Bf16Bits* hidden, const CudaLossHeadTargets& in, const std::int32_t* list, std::int64_t rows,
                    const CudaLossHeadShape& shape, DeviceBuffer<float>& rows_buffer, Bf16Bits* z, Bf16Bits* t);
  // dL/dY of those rows = dz W into rows_buffer, scattered to rows list[r] of hidden_grad.
  void chunk_hidden_grad(const Bf16Bits* dz, const CudaLossHeadTargets& in, const std::int32_t* list, std::int64_t rows,
                         const CudaLossHeadShape& shape, DeviceBuffer<float>& rows_buffer, float* hidden_grad);

  DeviceAllocator& allocator_;
  LossHeadOptions options_;
  CublasGemm gemm_;
};

}  // namespace dflash
