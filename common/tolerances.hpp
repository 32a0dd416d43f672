// SPEC §10's bounds, one name each, with why that value, in one place for the reference tests,
// the CUDA tests, the benchmark and `dflash verify`.
//
// SPEC §10: reference against itself <= 1e-12 (or bitwise where the order is the same); analytic
// gradients against 50-digit central differences <= 1e-9; low-precision production results
// <= 2 x the error of a plain low-precision computation of the same quantity + a floor stated per
// tensor.
#pragma once

#include <cstdint>

namespace dflash {

// The reference against itself (policies, chunk sizes, ranks, micro-steps, ZeRO stages, a resume on
// another R, the training golden recomputed, double against 50-digit): SPEC §10. Sums in another
// order differ by a few ulps (2^-52 ~ 2.2e-16) per term of the largest size; 1e-12 leaves ~4500
// ulps for long sums while a wrong term of relative size 1e-12 still fails. Across ranks it is
// measured per state vector as max |a - b| / max |b| (elementwise relative error is meaningless
// for moments near 0).
inline constexpr double kReferenceTolerance = 1e-12;

// The committed goldens regenerated (the reference cannot drift silently): on the machine that
// made the files regeneration is bitwise; 1e-13, tighter than SPEC §10's 1e-12, leaves room only
// for a libm that rounds a transcendental by an ulp.
inline constexpr double kGoldenRegenerateTolerance = 1e-13;

// TRAINING §12's formulas against values worked out by hand: both evaluate the same formulas with
// a few operations in another order (torch's addcdiv form m / denom times the step size), a few
// ulps per step, so 1e-14 relative after three steps, far below any formula mistake (a wrong bias
// correction moves the first step by 10%).
inline constexpr double kHandFormulaTolerance = 1e-14;

// Analytic gradients against 50-digit central differences: SPEC §10. The difference quotient is
// exact far beyond double precision, so this bounds the double gradient's own rounding (~1e-13
// measured) with room for rows whose gradient is a difference of nearly equal probabilities.
inline constexpr double kFiniteDifferenceTolerance = 1e-9;

// The low-precision rule's factor: production error <= kPlainErrorFactor x the plain bf16
// computation's error + floor (SPEC §10).
inline constexpr double kPlainErrorFactor = 2.0;

// Unit roundoff of fp32, 2^-24.
inline constexpr double kFp32Unit = 1.0 / 16777216.0;

// The floor of the bf16 rule at the test sizes (V <= 2^14): what fp32 arithmetic may add where
// bf16 storage happens to cost (almost) nothing, e.g. logits that bf16 holds exactly: fp32 row
// statistics (each thread sums at most V/256 terms, then an 8-level tree: for V <= 2^14,
// (64 + 8) u = 4.3e-6) with 2-ulp exp on the device, and fp32 products over V (sqrt(V) u ~ 1e-5
// at V = 2^14 even without cancellation). Not a fitted number: the test sizes stay at V <= 2^14.
inline constexpr double kFp32Floor = 1e-5;

// Worst-case error of fp32 row statistics computed by `threads` threads per row (the CUDA
// kernels: kRowThreads) - lse(z), lse(z/tau), lse(t/tau), ce, kl - in units of the row's scale
// 1 + |lse z| + |lse z/tau| + |lse t/tau| + max_v |t_v - z_v| / tau. Each thread streams
// n = ceil(V / threads) columns (rounded up to 8 for the vector path): every step costs at most
// 4 u of its running sum (a 2-ulp exp, a product, an add); each of the log2(threads) levels of the
// merge tree 4 u; finish 8 u (log, the sums, q_diff / sum_tt / tau); u = 2^-24. A worst case, not
// a fit: random rounding gives about its square root.
inline double fp32_row_stats_bound(std::int64_t vocab, int threads) {
  const std::int64_t per_thread = ((vocab + std::int64_t(threads) * 8 - 1) / (std::int64_t(threads) * 8)) * 8;
  int levels = 0;
  for (int t = threads; t > 1; t /= 2) ++levels;
  return (4.0 * double(per_thread) + 4.0 * levels + 8) * kFp32Unit;
}

// The bf16 rule's floor at any V: kFp32Floor up to the sizes it was derived for, and beyond them
// the worst case of the kernels' fp32 row statistics (fp32_row_stats_bound, ~2.3e-4 at
// V = 248320), which grows with V / 256 terms per thread. cuBLAS's fp32 accumulation of dL/dY
// over V (blocked sums) stays below the same bound. At full scale the plain bf16 error
// (2^-9 per logit) dominates this floor anyway.
inline double bf16_rule_floor(std::int64_t vocab, int threads) {
  const double stats = fp32_row_stats_bound(vocab, threads);
  return stats > kFp32Floor ? stats : kFp32Floor;
}

// SPEC §10's floor for the fp32 attention programs (the CUDA-core programs in float storage, on the
// host and the device): each tensor's norm-wise error against the double reference is at most
// 2 x that of the plain fp32 computation (the reference algorithm in float on the same inputs)
// plus this floor. The programs sum in a different order from the plain computation: the online
// softmax rescales each tile's partial sums by exp(m_old - m_new) (one more rounding per visited
// tile) and normalises at the end, and delta = dO . O replaces the plain sum of P dP. Each adds
// O(u) per term to sums of at most ~300
// keys or d = 128 products, of values within a factor of the largest: (300 + 128) u = 2.6e-5 is
// the worst-case linear bound with u = 2^-24; the rounding errors of independent terms add like
// sqrt(n), so 1e-5 is the floor, not a fit. The trunk's elementwise and row kernels (RMSNorm sums
// of H/256 terms then 256 partials, RoPE angles in double where the plain fp32 reference takes
// them in float) are sums of the same length and take the same floor.
inline constexpr double kAttentionFp32Floor = 1e-5;

// bf16 storage of the attention output adds one rounding of O (2^-9 relative) on top of fp32
// arithmetic: the floor for bf16 storage is that rounding, which the host run with the same
// storage also pays.
inline constexpr double kAttentionBf16Floor = 1.0 / 512;

// The CUDA training step's first gradient norm on R ranks against one rank: fp32 per-sequence terms
// summed in another order (the per-rank sums, then NCCL's), each element within ~R u of its
// magnitude scale; the norm is dominated by the large elements, so 1e-5 (~170 u) leaves room for
// R <= 8 while a rank's gradient lost or counted twice moves it by far more.
inline constexpr double kCrossRankNormTolerance = 1e-5;

// The CUDA loss against the PyTorch baseline on the same data (bench/cuda/summarize.py; not a
// SPEC §10 bound: another implementation, not the reference): 1e-3 relative. Both round logits
// to bf16 but in different GEMMs (cuBLAS vs PyTorch's choice of kernel and accumulation order),
// which moves each row's loss by up to ~2^-9 of its logits' size; over ~31000 rows these
// differences average out far below 1e-3, while a wrong term (a dropped row, a wrong tau power,
// a missing soft term) moves the loss by far more.
inline constexpr double kBaselineLossTolerance = 1e-3;

// The CUDA step's loss against the PyTorch peer's on the same data (bench/cuda/summarize_step.py;
// not a SPEC §10 bound: another implementation, not the reference): 5e-3 relative. The loss
// head's comparison (kBaselineLossTolerance, 1e-3) covers the bf16 logits; here the peer also keeps
// its residual stream and every activation in bf16 (as its users would), where the CUDA trunk keeps
// X in fp32: 2L + 1 more roundings of 2^-9 per row before the logits, unbiased, so they too average
// out over ~31000 rows; five times the loss head's bound leaves room for that, while a missing
// layer, a wrong mask or a wrong loss term moves the loss of this data by far more.
inline constexpr double kStepBaselineLossTolerance = 5e-3;

// The fp32 AdamW step (CUDA master weights and moments) against the double reference over
// `steps` steps, per element, in units of the quantity's scale (the test's: |x| plus the largest
// term that entered it, e.g. (1 - beta1) |g| for m or the step's |update| for theta). Each step
// rounds at most ~8 times per quantity (the clip product, the betas and lr terms converted to
// fp32, two products, a sum, sqrt, the division), each <= u = 2^-24 of that scale; 16 u per step
// leaves 2x for error carried from the previous step's rounded inputs. A decay applied to the
// wrong tensor (lr wd ~ 1e-4 relative) or a wrong bias correction is far outside it.
inline double adamw_fp32_bound(int steps) { return 16.0 * double(steps) * kFp32Unit; }

}  // namespace dflash
