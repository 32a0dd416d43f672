#include "reference/bf16_emulation.hpp"

#include <cmath>
#include <vector>

#include "common/bf16.hpp"
#include "common/row_stats.hpp"
#include "reference/linalg.hpp"

namespace dflash {
namespace {

double bf16_of(double x) { return round_to_bf16(static_cast<float>(x)); }

Tensor<double> rounded_to_bf16(MemoryTracker& tracker, const Tensor<double>& x) {
  Tensor<double> out = x.clone(tracker, x.category());
  for (std::int64_t e = 0; e < out.numel(); ++e) out[e] = bf16_of(out[e]);
  return out;
}

// Twice the largest distance between a device logit (fp32 sum of H products, rounded to bf16)
// and the exact one; with `rounded_inputs`, y and w were also rounded to bf16 on the way.
double device_logit_error_bound(const double* y, const double* w, std::int64_t H, double exact, bool rounded_inputs) {
  double magnitude = 0;
  for (std::int64_t h = 0; h < H; ++h) magnitude += std::abs(y[h] * w[h]);
  return std::ldexp(std::abs(exact), -8) + double(H) * std::ldexp(magnitude, -23) +
         (rounded_inputs ? std::ldexp(magnitude, -7) : 0.0);
}

bool argmax_is_ambiguous(const std::vector<double>& z, const std::vector<double>& bound) {
  std::size_t top = 0;
  for (std::size_t v = 1; v < z.size(); ++v) {
    if (z[v] > z[top]) top = v;
  }
  for (std::size_t v = 0; v < z.size(); ++v) {
    if (v != top && z[top] - z[v] <= bound[top] + bound[v]) return true;
  }
  return false;
}

}  // namespace

LossHeadProblem<double> round_to_device_formats(MemoryTracker& tracker, const LossHeadProblem<double>& p) {
  LossHeadProblem<double> q{rounded_to_bf16(tracker, p.hidden),
                            rounded_to_bf16(tracker, p.teacher_hidden),
                            rounded_to_bf16(tracker, p.lm_head),
                            p.labels,
                            {},
                            p.valid,
                            0.0};
  for (double w : p.weights) q.weights.push_back(static_cast<float>(w));
  q.weight_sum = sum_weights(std::span<const double>(q.weights));
  return q;
}

Bf16Emulation hybrid_loss_bf16_emulation(MemoryTracker& tracker, const LossHeadOptions& options,
                                         const LossHeadProblem<double>& p,
                                         const LossHeadProblem<double>* exact_inputs) {
  const LossHeadProblem<double>& x = exact_inputs != nullptr ? *exact_inputs : p;  // what the reference saw
  const LossHeadTargets<double> in = p.targets();
  validate_loss_head(options, p.hidden, in, p.weight_sum);
  const std::int64_t T = p.hidden.dim(0), H = p.hidden.dim(1), V = p.lm_head.dim(0);
  const HybridHyper<double> hp = hybrid_hyper<double>(options);
  const double h = hp.hard, s = hp.soft, tau = hp.tau;

  Bf16Emulation e{{{},
                   Tensor<double>(tracker, MemoryCategory::outputs, {T}),
                   Tensor<double>(tracker, MemoryCategory::outputs, {T}),
                   Tensor<double>(tracker, MemoryCategory::gradients, {T, H}),
                   std::nullopt},
                  0};
  LossHeadResult<double>& r = e.result;
  std::vector<double> z(V), t(V), exact(V), bound(V), dz(V);
  for (std::int64_t i = 0; i < T; ++i) {
    if (p.valid[i] == 0) continue;
    const std::int64_t y = p.labels[i];
    HybridRowStats<double> stats;
    for (std::int64_t v = 0; v < V; ++v) {
      exact[v] = dot(x.hidden.row(i), x.lm_head.row(v), H);
      bound[v] = device_logit_error_bound(x.hidden.row(i), x.lm_head.row(v), H, exact[v], exact_inputs != nullptr);
      z[v] = bf16_of(dot(p.hidden.row(i), p.lm_head.row(v), H));
      t[v] = bf16_of(dot(p.teacher_hidden.row(i), p.lm_head.row(v), H));
      stats.update(z[v], t[v], v, y, tau);
    }
    const HybridRowResult<double> row = finish_row(stats, tau);
    const double loss_i = hybrid_token_loss(row, hp);
    const double w = p.weights[i];
    r.lse[i] = row.lse_z;
    r.token_loss[i] = loss_i;
    r.stats.add_row(w, loss_i, row, stats.argmax == y);
    e.ambiguous_argmax_rows += argmax_is_ambiguous(exact, bound) ? 1 : 0;

    const double scale = row_grad_scale(w, p.weight_sum);
    for (std::int64_t v = 0; v < V; ++v) {
      dz[v] = bf16_of(hybrid_logit_grad(z[v], teacher_log_prob(t[v], row, tau), v == y, row, tau, h, s, scale));
    }
    matmul_ab_accumulate(dz.data(), p.lm_head.data(), r.hidden_grad.row(i), 1, H, V);
  }
  r.stats.finish(p.weight_sum);
  return e;
}

}  // namespace dflash
