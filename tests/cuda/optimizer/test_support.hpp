// What the CPU and GPU tests of the optimizer kernels share: a flat vector with decayed and
// non-decayed tensors, random inputs, and a double AdamW written out from TRAINING §12 here
// (torch.optim.AdamW's formulas, not common/adamw.hpp's: a bug there must not hide in both sides).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/tolerances.hpp"
#include "cuda/optimizer/adamw_program.hpp"
#include "harness/cuda/host_optimizer_exec.hpp"

namespace dflash {

// The step's hyperparameters: lr wd = 1e-4 relative decay, far outside the fp32 rule.
struct TestAdamW {
  double lr = 1e-3, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, max_norm = 5.0;
};

// A matrix, a norm weight (64), a matrix, a norm weight (37): n elements.
struct TestFlat {
  std::vector<std::int64_t> ends;
  std::vector<unsigned char> decay = {1, 0, 1, 0};
  explicit TestFlat(std::int64_t n) : ends{n / 2, n / 2 + 64, n - 37, n} {}
  DecayTable table() const { return {ends.data(), decay.data(), int(ends.size())}; }
  // Element by element from the tensor list, independently of decays_at.
  bool decays(std::int64_t e) const {
    for (std::size_t i = 0; i < ends.size(); ++i)
      if (e < ends[i]) return decay[i] != 0;
    return false;
  }
};

inline std::vector<float> random_floats(std::int64_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& value : x) value = u(rng);
  return x;
}

// The double reference from fp32 initial master weights, and each element's scale for the fp32
// rule (common/tolerances.hpp adamw_fp32_bound): |theta| plus everything the steps moved it by,
// |m| plus the largest clipped |g|, |v| plus its square.
// The fp32 step's range over n elements of theta, m, v (host or device) for step t.
inline AdamWRange adamw_range(float* theta, float* m, float* v, const float* g, std::int64_t n, double clip,
                              const TestAdamW& h, long long t, DecayTable table) {
  return {theta,
          m,
          v,
          g,
          0,
          n,
          clip,
          adamw_scalars(h.lr, h.weight_decay, true, h.beta1, h.beta2, h.eps, t),
          adamw_scalars(h.lr, h.weight_decay, false, h.beta1, h.beta2, h.eps, t),
          table};
}

class DoubleAdamW {
 public:
  DoubleAdamW(const std::vector<float>& theta, const TestFlat& flat, const TestAdamW& h)
      : flat_(flat),
        h_(h),
        theta_(theta.begin(), theta.end()),
        m_(theta.size(), 0.0),
        v_(theta.size(), 0.0),
        moved_(theta.size(), 0.0),
        g_max_(theta.size(), 0.0) {}

  // Optimizer step t (0-based) with gradient g scaled by clip, at the learning rate h.lr.
  void step(const std::vector<float>& g, double clip, long long t) { step(g, clip, t, h_.lr); }
  // The same at learning rate `lr` (a schedule's lr_t).
  void step(const std::vector<float>& g, double clip, long long t, double lr) {
    const double bias1 = 1.0 - std::pow(h_.beta1, double(t + 1)), bias2 = 1.0 - std::pow(h_.beta2, double(t + 1));
    for (std::size_t i = 0; i < theta_.size(); ++i) {
      const double gd = double(g[i]) * clip;
      if (flat_.decays(std::int64_t(i))) {
        moved_[i] += lr * h_.weight_decay * std::abs(theta_[i]);
        theta_[i] *= 1.0 - lr * h_.weight_decay;
      }
      m_[i] = h_.beta1 * m_[i] + (1.0 - h_.beta1) * gd;
      v_[i] = h_.beta2 * v_[i] + (1.0 - h_.beta2) * gd * gd;
      const double update = lr / bias1 * m_[i] / (std::sqrt(v_[i]) / std::sqrt(bias2) + h_.eps);
      theta_[i] -= update;
      moved_[i] += std::abs(update);
      g_max_[i] = std::max(g_max_[i], std::abs(gd));
    }
    ++steps_;
  }

  // theta, m, v (fp32) within the fp32 rule of the reference after the steps taken so far.
  ::testing::AssertionResult within_fp32_rule(const std::vector<float>& theta, const std::vector<float>& m,
                                              const std::vector<float>& v) const {
    const double bound = adamw_fp32_bound(steps_);
    for (std::size_t i = 0; i < theta_.size(); ++i) {
      const double scale[3] = {std::abs(theta_[i]) + moved_[i], std::abs(m_[i]) + g_max_[i],
                               std::abs(v_[i]) + g_max_[i] * g_max_[i]};
      const double diff[3] = {std::abs(theta[i] - theta_[i]), std::abs(m[i] - m_[i]), std::abs(v[i] - v_[i])};
      const char* names[3] = {"theta", "m", "v"};
      for (int q = 0; q < 3; ++q) {
        if (!(diff[q] <= bound * scale[q])) {
          return ::testing::AssertionFailure() << names[q] << " element " << i << " after " << steps_
                                               << " steps: |fp32 - double| " << diff[q] << " > " << bound * scale[q];
        }
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  const TestFlat& flat_;
  TestAdamW h_;
  std::vector<double> theta_, m_, v_, moved_, g_max_;
  int steps_ = 0;
};

}  // namespace dflash
