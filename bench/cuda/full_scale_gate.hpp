// The full-scale correctness gate of the CUDA loss head (bench/cuda/loss_head_bench.cpp), host
// side: at T 32768, H 5120, V 248320 the double reference cannot run whole, so a sample of rows
// is recomputed in fp64 from the same bf16 inputs (bench/cuda/fp64_rows.hpp gives their exact
// logits z, t and products with W_lm) and the CUDA results on those rows are held to SPEC §10's
// bf16 rule: at most kPlainErrorFactor x the plain bf16 computation's error plus a floor. Rows
// without a label must come out exactly 0.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/loss_row.hpp"
#include "reference/bf16_tolerance.hpp"

namespace dflash {

// The rows checked, for valid flags `valid` [T]: the first and last rows without a label (their
// results must be exactly 0), then, counted in valid rows (the loss head computes the valid rows
// only, in chunks of c of them: cuda/loss_head/row_gather_program.hpp), the first and last rows of the
// chunks at every chunk size, the rows around 2^31 / V (where a 32-bit flat index into an [n, V]
// tensor would overflow: materialize's logits), the rows around every start in `call_starts` (where
// one of the run's cuBLAS products is cut into calls: cuda/gemm/cublas_call.hpp's
// gemm_slicing_within_span) and the last row. Sorted, distinct. Every one of them is checked: more
// than kGateMaxRows (too many chunk sizes) throws InputError rather than dropping edges.
inline constexpr int kGateMaxRows = 64;
std::vector<std::int64_t> gate_sample_rows(std::span<const std::uint8_t> valid, std::int64_t V,
                                           std::span<const std::int64_t> chunks,
                                           std::span<const std::int64_t> call_starts = {});

// The sampled rows' exact and plain-bf16 results, from their fp64 logits.
struct GateRows {
  std::int64_t vocab = 0, hidden = 0;
  std::vector<std::int64_t> rows;
  std::vector<std::uint8_t> valid;
  std::vector<double> lse, token_loss, plain_lse, plain_token_loss;  // [n]; 0 where invalid
  std::vector<double> dz, plain_dz;                                  // [n, V] dL/dz; plain: bf16-rounded
  std::vector<double> hidden_grad, plain_hidden_grad;                // [n, H], filled by the caller (dz W)
};

// z, t: [n, V] exact logits of rows[j] (double). The plain computation rounds z, t and dL/dz to
// bf16 (as the device stores them) and is exact elsewhere (reference/bf16_emulation.hpp).
GateRows gate_rows_from_logits(std::span<const std::int64_t> rows, std::span<const double> z, std::span<const double> t,
                               std::int64_t vocab, std::int64_t hidden, std::span<const std::int64_t> labels,
                               std::span<const float> weights, std::span<const std::uint8_t> valid, double weight_sum,
                               const HybridHyper<double>& hp);

// What a CUDA run produced on the sampled rows: lse, token loss [n], dL/dY [n, H].
struct GateObserved {
  std::vector<float> lse, token_loss, hidden_grad;
};

// The rule per quantity over the sampled valid rows (lse, token_loss, hidden_grad), and
// "unlabelled_rows_zero" (error 0 when every output of an invalid row is exactly 0, else 1).
Bf16RuleReport check_full_scale_gate(const GateRows& expected, const GateObserved& observed);

}  // namespace dflash
