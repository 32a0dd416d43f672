// The SPEC §10 bound of each final/ and metrics/ tensor of a training golden for a training run
// whose step is bf16 (bf16 working copy, fp32 accumulation) and whose optimizer is fp32 (the
// CUDA backend, `dflash golden check-training --impl cuda`), on the golden check's measure
// (reference/compare.hpp: largest absolute difference over the tensor's largest |value|).
//
// Three sources of difference from the double reference, each bounded once:
//   the step       the bf16 step's error at given parameters: step_result_bound (golden/
//                  golden_compare_rules.hpp), 2 x a plain bf16 step's error, per tensor;
//   the trajectory a gradient off by that much moves the next parameters, so steps 1, 2, ... run
//                  elsewhere. Adam normalises the gradient: however small the gradient error, an
//                  element whose gradient is near 0 can have its update change sign, so a
//                  parameter moves by up to 2 lr_t A_t at step t (adam_update_bound below), and
//                  that is the bound of final/param (adam_parameter_drift). The moments and the
//                  metrics of later steps depend on the gradient at the moved parameters, which
//                  has no closed-form bound (no Lipschitz constant of the drafter): SPEC §10's
//                  plain computation measures it. plain_bf16_training runs the double reference
//                  training with every step's gradient displaced by the plain bf16 step's error
//                  (half of step_result_bound, of each tensor's largest |g|, with fixed random
//                  signs), and each tensor may be off by 2 x the plain run's error;
//   the optimizer  fp32 master weights and moments: adamw_fp32_bound (common/tolerances.hpp) in
//                  units of each quantity's scale, the floor under every optimizer result.
// What precision cannot change is exact: lr (host arithmetic), weight_sum (W from the data and
// anchors on the host), tokens; clipped too unless a step's norm is within the norm's own bound
// of max_grad_norm, where the flag may legitimately differ.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "golden/training.hpp"

namespace dflash {

// The largest |m_hat / (sqrt(v_hat) + eps)| AdamW can apply at step t (0-based), whatever the
// gradients: by Cauchy-Schwarz on m_t = (1 - b1) sum_k b1^(t-k) g_k against
// v_t = (1 - b2) sum_k b2^(t-k) g_k^2,
//   |m_hat_t| / sqrt(v_hat_t) <= (1 - b1) / (1 - b1^(t+1)) * sqrt((1 - b2^(t+1)) / (1 - b2))
//                                * sqrt(sum_{j=0..t} (b1^2 / b2)^j).
// 1 at t = 0 (the update is the gradient's sign); 1.0036 at t = 2 for b1 = 0.9, b2 = 0.999.
double adam_update_bound(double beta1, double beta2, std::int64_t t);

// The largest difference of one parameter between two AdamW runs from the same start, whatever
// their gradients, after `steps` steps: theta_{t+1} = (1 - lr_t wd) theta_t - lr_t u_t with
// |u_t| <= A_t in both, and 0 <= 1 - lr_t wd <= 1, so d_{t+1} <= d_t + 2 lr_t A_t:
//   D = sum_{t < steps} 2 lr_t A_t.
double adam_parameter_drift(const TrainingConfig& training, std::int64_t steps);

// SPEC §10's plain computation of a bf16 training run (see above): the reference training core on
// the golden's initial parameters and inputs, each step's gradient displaced by
// `relative_displacement` x its tensor's largest |g|, signs from a fixed seed. Its final/ and
// metrics/ tensors, and per parameter the largest |c_t g_t| (clipped, before the displacement) of
// any step: what enters the moments, the scale of their fp32 rule.
struct PlainTraining {
  GoldenResults results;
  std::map<std::string, double, std::less<>> largest_clipped_gradient;
};
PlainTraining plain_bf16_training(MemoryTracker& tracker, const TrainingGolden& golden, double relative_displacement);

// The bound of every final/ and metrics/ tensor of the golden (see the top of this file).
std::map<std::string, double, std::less<>> bf16_training_golden_tolerances(const TrainingGolden& golden);

}  // namespace dflash
