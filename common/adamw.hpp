// The optimizer's per-element arithmetic (TRAINING §12), shared by the double reference and the
// CUDA kernels: the learning-rate schedule, the clipping coefficient and one AdamW update, exactly
// as torch.optim.AdamW (decoupled decay, bias corrections as written) and
// torch.nn.utils.clip_grad_norm_ compute them. One home for the formulas; every backend calls
// these functions per element, in this order of operations.
#pragma once

#include <cmath>

#include "common/hd.hpp"

namespace dflash {

// lr_t for optimizer step t (0-based): linear warm-up lr (t+1)/warmup for t < warmup, then a
// cosine from lr down to min_lr over total - warmup steps, then min_lr from total on.
DFLASH_HD inline double learning_rate_at(long long t, double lr, double min_lr, long long warmup, long long total) {
  if (t < warmup) return lr * double(t + 1) / double(warmup);
  if (t >= total) return min_lr;
  const long long span = total - warmup > 1 ? total - warmup : 1;
  const double progress = double(t - warmup) / double(span);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + ::cos(3.14159265358979323846 * progress));
}

// clip_grad_norm_: c = max_norm / (n + 1e-6), applied (g <- c g) only when max_norm > 0 and c < 1.
// Returns the factor the gradient is multiplied by (1 when not clipped).
inline constexpr double kClipNormEpsilon = 1e-6;  // torch.nn.utils.clip_grad_norm_'s constant
DFLASH_HD inline double clip_coefficient(double norm, double max_norm) {
  if (!(max_norm > 0)) return 1.0;
  const double c = max_norm / (norm + kClipNormEpsilon);
  return c < 1.0 ? c : 1.0;
}

// The step's scalars, computed once per step (in double) and shared by every element.
struct AdamWScalars {
  double lr = 0;            // lr_t
  double decay_factor = 1;  // 1 - lr_t wd for a decayed tensor (matrices), 1 for norm weights
  double beta1 = 0.9, beta2 = 0.95, epsilon = 1e-8;
  double step_size = 0;              // lr_t / (1 - beta1^(t+1))
  double bias_correction2_sqrt = 1;  // sqrt(1 - beta2^(t+1))
};

// torch.optim.AdamW (single-tensor path) for step t: bias corrections from t + 1.
DFLASH_HD inline AdamWScalars adamw_scalars(double lr_t, double weight_decay, bool decay, double beta1, double beta2,
                                            double epsilon, long long t) {
  AdamWScalars s;
  s.lr = lr_t;
  s.decay_factor = decay ? 1.0 - lr_t * weight_decay : 1.0;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.epsilon = epsilon;
  s.step_size = lr_t / (1.0 - ::pow(beta1, double(t + 1)));
  s.bias_correction2_sqrt = ::sqrt(1.0 - ::pow(beta2, double(t + 1)));
  return s;
}

// One element: theta <- theta (1 - lr wd); m <- b1 m + (1 - b1) g; v <- b2 v + (1 - b2) g^2;
// theta <- theta - step_size m / (sqrt(v) / sqrt(1 - b2^(t+1)) + eps). Real is the master
// precision (double in the reference, float on the GPU); the scalars stay double until here.
// The last line is torch's addcdiv_(m, denom, value = -step_size): theta + (-step_size) (m / denom).
DFLASH_HD inline float adamw_sqrt(float x) { return sqrtf(x); }
DFLASH_HD inline double adamw_sqrt(double x) { return ::sqrt(x); }

template <class Real>
DFLASH_HD inline void adamw_update(Real& theta, Real& m, Real& v, Real g, const AdamWScalars& s) {
  theta = theta * Real(s.decay_factor);
  m = Real(s.beta1) * m + Real(1.0 - s.beta1) * g;
  v = Real(s.beta2) * v + Real(1.0 - s.beta2) * (g * g);
  const Real denom = adamw_sqrt(v) / Real(s.bias_correction2_sqrt) + Real(s.epsilon);
  theta = theta + Real(-s.step_size) * (m / denom);
}

}  // namespace dflash
