// The bound each output/ and grad/ tensor of a golden is held to when someone else's
// implementation is compared with it (`dflash golden compare --rule exact|fp32|bf16`), SPEC §10.
//
// Every bound is on the golden check's measure (golden/check.hpp: norm-wise relative error,
// the losses and lse relative to at least the golden's log-partition magnitude).
//
//   exact  a double implementation: every tensor within kReferenceTolerance (1e-12), the bound of
//          the reference against itself.
//   fp32, bf16  the loss-head quantities (output/loss, ce, kl, lse, token_loss, accuracy,
//          weight_sum) by the calibrated rule the CUDA loss head is held to: 2 x the error of a
//          plain computation of the same quantity in that precision from the golden's own
//          inputs, + kFp32Floor (common/tolerances.hpp, which derives it). bf16: the plain
//          computation is golden/bf16_rule.hpp's (bf16 storage of Y, G, W_lm, logits and
//          dL/dz, exact arithmetic otherwise). fp32: the reference loss head run in float on the
//          golden's Y, teacher rows and W_lm rounded to float. Plus the rounding of the result
//          file's own storage (stored_result_bound).
//          The rest (output/hidden, output/weights, grad/*): step_result_bound below.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "golden/file.hpp"
#include "io/safetensors_dtype.hpp"

namespace dflash {

enum class CompareRule { exact, fp32, bf16 };

std::string_view compare_rule_name(CompareRule rule);
// "exact", "fp32" or "bf16"; nothing otherwise.
std::optional<CompareRule> compare_rule_from_name(std::string_view name);

// The storage a result must have at least to be judged by a rule: F64 for exact, F32 for fp32,
// BF16 for bf16. A result stored coarser cannot carry the precision the rule claims (its own
// rounding would already be the error), so it fails, saying so.
safetensors::Dtype finest_storage_needed(CompareRule rule);
// Whether `stored` is a float dtype the comparison reads (F64, F32, BF16).
bool is_result_dtype(safetensors::Dtype stored);
// Whether `stored` is at least as precise as the rule needs.
bool storage_is_fine_enough(safetensors::Dtype stored, CompareRule rule);

// Unit roundoff 2^-p of a p-bit significand: fp32 2^-24, bf16 2^-8.
inline constexpr double kFp32UnitRoundoff = 0x1p-24;
inline constexpr double kBf16UnitRoundoff = 0x1p-8;

// The roundings on the way from the inputs to a result of the step, along one path (parallel
// branches such as q, k and v, or gate and up, count once):
//   stored values   per layer 12 in the forward (normed input, one projection, its rotation,
//                   scores, softmax, attention output, o projection, residual, normed residual,
//                   gate or up, gated product, down) and 12 gradients mirroring them in the
//                   backward; plus 8 outside the layers (fc output, the final norm, logits, dL/dz,
//                   dL/dY, the stored result itself, two to spare): 24 L + 8.
//   reductions      per layer 6 sums in the forward (projection, scores, attention-weighted values,
//                   o projection, gate/up, down) and 6 in the backward; plus 4 (fc, logits, dL/dY,
//                   the weight gradient's sum over rows): 12 L + 4.
struct StepRoundings {
  double stored = 0;
  double reductions = 0;
};
StepRoundings step_roundings(const DrafterConfig& config);

// The longest reduction of the step: max(H, I, nh d, K H, S + T keys, V, the nseq T block rows
// and nseq S context rows a weight gradient sums over).
double step_longest_reduction(const DrafterConfig& config, std::int64_t nseq, std::int64_t S, std::int64_t T);

// The bound of a tensor outside the loss head under fp32 or bf16 (exact: kReferenceTolerance):
// 2 x the error expected of a plain computation, with rounding errors modelled as independent
// (the probabilistic bound of Higham and Mary, SIAM J. Sci. Comput. 41 (2019): k roundings of
// unit roundoff u move a result by ~sqrt(k) u; a sum of n terms accumulated in fp32 by
// ~sqrt(n) 2^-24):
//     2 sqrt(stored u_s^2 + reductions n 2^-48)
// with u_s the unit roundoff intermediates are stored in (fp32 2^-24, bf16 2^-8; accumulation is
// fp32 in both, as in mixed-precision training) and n = step_longest_reduction. The factor 2 is
// SPEC §10's over the plain computation. For the mid config (configs/mid.json: 5 layers,
// V = 4096) this is 6.1e-5 (fp32) and 0.088 (bf16); for two layers of the tiny goldens' sizes
// 3.7e-6 and 0.058. It grows with depth: for a bf16 drafter of 7 layers or more, a gradient 10 %
// off is within it (the loss-head quantities are still held to the calibrated rule).
double step_result_bound(CompareRule rule, const DrafterConfig& config, std::int64_t nseq, std::int64_t S,
                         std::int64_t T);

// The loss-head tensors the calibrated rule covers (both low precisions).
bool is_loss_head_result(std::string_view tensor);

// The largest relative rounding error of storing a value in a result dtype (its unit roundoff:
// F64 2^-53, F32 2^-24, BF16 2^-8). On the compare's measure a rounded tensor is off by at most
// this (the denominator is at least max |golden|).
double storage_unit_roundoff(safetensors::Dtype stored);

// The bound of one result tensor stored as `stored`, from the rule's bound of its computation: the
// loss-head bounds measure a plain computation that keeps its results in double, so the rounding
// of the result file's own storage is added to them (a bf16 loss stored as BF16 is off by up to
// 2^-8 of itself however it was computed); the step bounds already count it (one of their stored
// roundings), as does exact's (F64 storage only).
double stored_result_bound(std::string_view tensor, double computation_bound, safetensors::Dtype stored);

// The bound of every output/ and grad/ tensor of the golden under the rule.
std::map<std::string, double, std::less<>> golden_result_bounds(const Golden& golden, CompareRule rule);

}  // namespace dflash
