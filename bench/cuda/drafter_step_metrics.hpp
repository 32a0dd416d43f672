// The CPU side of the full-scale drafter step benchmark (bench_cuda_drafter_step): what a step
// costs in model FLOPs, how its measured peaks compare with `dflash plan`, and which targets it
// missed. Pure functions, tested on the CPU (tests/bench).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/tolerances.hpp"
#include "planner/plan_vs_measured.hpp"
#include "reference/drafter_dims.hpp"
#include "reference/loss_policy.hpp"
#include "reference/trunk_policy.hpp"

namespace dflash {

// The dense bf16 tensor-core peak of the Hopper SXM cards, 989 TFLOP/s: the H100 SXM and H200
// datasheets both give "BF16 Tensor Core 1,979 TFLOPS" with sparsity, i.e. 989.5 dense (the same
// tensor cores at the same boost clock; the H200 differs in memory). The GPU machine may be either.
inline constexpr double kHopperSxmDatasheetBf16Tflops = 989.0;

// The targets (performance: a miss is reported on its own line and exit code 3).
inline constexpr double kStepMfuTarget = 0.50;     // model-FLOP rate / measured large-GEMM rate
inline constexpr double kPlanExcessTarget = 0.02;  // measured peak <= (1 + this) x planned, per category

// Visible (query row, key) pairs of one query head of one layer under SPEC §3's mask, summed
// over the block rows: a kept block n sees context keys [max(0, a_n + k - (window - 1)), a_n)
// (sliding) or [0, a_n) (full), and its own block's keys k' <= k (sliding) or all B; an unkept
// block sees nothing.
std::int64_t attention_visible_pairs(std::span<const std::int64_t> anchors, std::span<const std::uint8_t> keep,
                                     std::int64_t block_size, bool sliding, std::int64_t window);

// FLOPs of one sequence's step. Model FLOPs are what the maths needs once (no recomputation),
// forward and backward: a product [m, k] x [k, n] is 2 m n k, its backward 2 m n k for the input
// gradient and 2 m n k for the weight gradient (DESIGN-NOTES.md's accounting):
//   block_linear  per layer 6 T P_l, P_l = H nh d + 2 H nkv d + nh d H + 3 H I (q, k, v, o, gate, up, down)
//   context       per layer the context keys and values, 6 S 2 H nkv d; fc 4 S K H H (forward and
//                 dW; 6 when dL/dF is wanted)
//   attention     per layer and query head: 4 d per visible pair forward (Q K^T, P V), 8 d backward
//                 (dP, dV, dQ, dK)
//   loss_head     z = Y W_lm^T, t = G W_lm^T, dL/dY = dz W_lm: 3 x 2 T H V (W_lm frozen: no dW)
// Recomputation (executed, not model): a trunk policy other than `none` runs every layer's forward
// again (block linear 2 T P_l and the context keys/values in trunk_recompute, the attention
// forward in attention_recompute); chunk_recompute runs z and t again (5 V-wide products in all).
struct StepFlops {
  double block_linear = 0, context = 0, attention_forward = 0, attention_backward = 0, loss_head = 0;
  double trunk_recompute = 0, attention_recompute = 0, loss_recompute = 0;
  double attention() const { return attention_forward + attention_backward; }
  double attention_executed() const { return attention() + attention_recompute; }
  double model() const { return block_linear + context + attention() + loss_head; }
  double executed() const { return model() + trunk_recompute + attention_recompute + loss_recompute; }
};

// visible_pairs: attention_visible_pairs of each layer (size L).
StepFlops drafter_step_flops(const DrafterDims& dims, std::span<const std::int64_t> visible_pairs, bool features_grad,
                             TrunkPolicy trunk_policy, LossPolicy loss_policy);

// Every category whose measured peak exceeds the plan by more than kPlanExcessTarget, as
// "saved: measured 1.23 GiB > planned 1.10 GiB + 2%".
std::vector<std::string> plan_excess_misses(const std::vector<CategoryComparison>& comparisons);

// The step's own targets (the PyTorch comparison is summarize_step.py's): MFU against the
// measured GEMM rate, and the plan.
std::vector<std::string> step_target_misses(double model_tflops, double card_tflops,
                                            const std::vector<CategoryComparison>& comparisons);

}  // namespace dflash
