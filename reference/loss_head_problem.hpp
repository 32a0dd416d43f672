// A random loss-head problem built from a seed: the data the verification matrix, the tests, the
// properties, the benchmarks and the CUDA comparison all run on. The numbers are generated in
// double and converted, so the double and the 50-digit problems hold exactly the same values.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference/counter_rng.hpp"
#include "reference/loss_head_types.hpp"

namespace dflash {

struct LossHeadProblemSpec {
  std::int64_t rows = 8;    // T
  std::int64_t hidden = 8;  // H
  std::int64_t vocab = 32;  // V
  std::uint64_t seed = 1;
  double logit_scale = 4.0;            // typical |z| (lm_head entries are scaled by logit_scale / sqrt(H))
  double teacher_scale = 1.0;          // teacher hidden rows are scaled by this (> 1: a sharper teacher)
  double invalid_fraction = 0.2;       // rows with w01 = 0 (no label, no teacher)
  double zero_weight_fraction = 0.1;   // valid rows whose weight is exactly 0
  double zero_lm_head_fraction = 0.0;  // lm_head entries set exactly to 0
  bool all_weights_zero = false;       // W = 0
  bool poison_invalid_rows = true;     // invalid rows get label -1 and NaN teacher rows: never read
};

template <class Real>
struct LossHeadProblem {
  Tensor<Real> hidden;          // Y [T,H]
  Tensor<Real> teacher_hidden;  // [T,H]
  Tensor<Real> lm_head;         // [V,H]
  std::vector<std::int64_t> labels;
  std::vector<Real> weights;
  std::vector<std::uint8_t> valid;
  Real weight_sum{0};

  LossHeadTargets<Real> targets() const {
    return LossHeadTargets<Real>{&teacher_hidden, &lm_head, nullptr, labels, weights, valid};
  }
};

template <class Real>
LossHeadProblem<Real> make_loss_head_problem(MemoryTracker& tracker, const LossHeadProblemSpec& spec) {
  const std::int64_t T = spec.rows, H = spec.hidden, V = spec.vocab;
  CounterRng rng(spec.seed);
  LossHeadProblem<Real> p{Tensor<Real>(tracker, MemoryCategory::inputs, {T, H}),
                          Tensor<Real>(tracker, MemoryCategory::inputs, {T, H}),
                          Tensor<Real>(tracker, MemoryCategory::frozen, {V, H}),
                          std::vector<std::int64_t>(T),
                          std::vector<Real>(T),
                          std::vector<std::uint8_t>(T),
                          Real(0)};
  for (std::int64_t i = 0; i < T * H; ++i) p.hidden[i] = Real(rng.uniform(-1, 1));
  for (std::int64_t i = 0; i < T * H; ++i) p.teacher_hidden[i] = Real(spec.teacher_scale * rng.uniform(-1, 1));
  const double head_scale = spec.logit_scale * std::sqrt(3.0 / double(H));
  for (std::int64_t i = 0; i < V * H; ++i) {
    const double w = head_scale * rng.uniform(-1, 1);
    p.lm_head[i] = Real(rng.bernoulli(spec.zero_lm_head_fraction) ? 0.0 : w);
  }
  for (std::int64_t i = 0; i < T; ++i) {
    const bool valid = !rng.bernoulli(spec.invalid_fraction);
    p.valid[i] = valid ? 1 : 0;
    p.labels[i] = valid ? rng.below(V) : -1;
    const double w = rng.bernoulli(spec.zero_weight_fraction) ? 0.0 : rng.uniform(0.05, 1.0);
    p.weights[i] = Real(valid && !spec.all_weights_zero ? w : 0.0);
    if (!valid && spec.poison_invalid_rows) {
      for (std::int64_t h = 0; h < H; ++h) p.teacher_hidden.row(i)[h] = Real(std::numeric_limits<double>::quiet_NaN());
    }
  }
  p.weight_sum = sum_weights(std::span<const Real>(p.weights));
  return p;
}

// The same problem in another scalar type (exact: double converts exactly to wider types).
template <class To, class From>
LossHeadProblem<To> convert_problem(MemoryTracker& tracker, const LossHeadProblem<From>& p) {
  auto convert = [&](const Tensor<From>& t) {
    Tensor<To> out(tracker, t.category(), t.shape());
    for (std::int64_t i = 0; i < t.numel(); ++i) out[i] = To(t[i]);
    return out;
  };
  LossHeadProblem<To> q{convert(p.hidden), convert(p.teacher_hidden), convert(p.lm_head), p.labels, {}, p.valid, To(0)};
  for (const From& w : p.weights) q.weights.push_back(To(w));
  q.weight_sum = To(p.weight_sum);
  return q;
}

}  // namespace dflash
