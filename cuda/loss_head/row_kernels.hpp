// The loss head's kernels (SPEC §5), behind host-callable launchers so that host code compiled by
// the host compiler can drive them. Each row of a logits chunk is one thread block: it streams the
// row's V columns once (common/row_stats.hpp, fp32) and merges the threads' partial statistics
// in a fixed tree, so results are bitwise reproducible run to run. The kernels' bodies are the
// block programs of row_program.hpp and row_gather_program.hpp, which the CPU backend
// (harness/cuda/host_loss_head_backend.hpp) runs over the same grids; the fault finders' per-element
// rules are row_program.hpp's too.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/loss_head_stats.hpp"
#include "cuda/loss_head/row_program.hpp"
#include "cuda/runtime/bf16_bits.hpp"

namespace dflash {

// The valid rows (valid_i = 1), ascending, in list[0, n), and n in *count (one block;
// cuda/loss_head/row_gather_program.hpp). valid must hold only 0 and 1.
void launch_compact_valid_rows(const std::uint8_t* valid, std::int64_t T, std::int32_t* list, std::int32_t* count,
                               cudaStream_t stream);

// dst[r,:] <- src[list[r],:] for r < rows (rows of `cols` bf16): a chunk's compact input rows.
void launch_gather_rows(const Bf16Bits* src, const std::int32_t* list, std::int64_t rows, std::int64_t cols,
                        Bf16Bits* dst, cudaStream_t stream);

// dst[list[r],:] <- src[r,:] for r < rows (fp32): a chunk's dL/dY back to its rows.
void launch_scatter_rows(const float* src, const std::int32_t* list, std::int64_t rows, std::int64_t cols, float* dst,
                         cudaStream_t stream);

// Statistics of compact chunk rows r in [0, rows): student logits z[r,:], teacher logits t[r,:]
// (bf16, row-major, V columns) of global row list[r] (a valid row). Invalid rows are not
// visited: their outputs are the caller's zeros.
void launch_hybrid_row_stats(const Bf16Bits* z, const Bf16Bits* t, std::int64_t rows, std::int64_t vocab,
                             const std::int32_t* list, DeviceRowTargets targets, HybridWeights weights,
                             DeviceRowOutputs out, cudaStream_t stream);

// z[r,:] <- dL/dz (bf16, in place) from the saved statistics of global row list[r]; scale w_i / W
// (0 when W = 0 or the weight is 0: such rows become exact zeros).
void launch_hybrid_logit_grad(Bf16Bits* z, const Bf16Bits* t, std::int64_t rows, std::int64_t vocab,
                              const std::int32_t* list, DeviceRowTargets targets, HybridWeights weights,
                              const float* row_stats, float weight_sum, cudaStream_t stream);

// Sums over all T rows, in double, in a fixed order (one block): LossHeadStats before finish
// (sum w l, sum w ce, sum w kl, max magnitude, correct, valid rows).
void launch_loss_totals(const DeviceRowOutputs& rows_out, DeviceRowTargets targets, std::int64_t T,
                        LossHeadStats<double>* totals, cudaStream_t stream);

// Lowest offending row of each kind (RowTargetFaults, row_program.hpp), or T when there is none.
void launch_find_row_target_faults(DeviceRowTargets targets, std::int64_t T, std::int64_t vocab,
                                   RowTargetFaults* faults, cudaStream_t stream);

// Lowest flat index of a non-finite element of x [rows, cols], skipping rows whose mask is 0 (no
// mask: every row); rows * cols when all are finite. *first must hold rows * cols on entry.
void launch_find_non_finite_bf16(const Bf16Bits* x, std::int64_t rows, std::int64_t cols, const std::uint8_t* row_mask,
                                 unsigned long long* first, cudaStream_t stream);

}  // namespace dflash
