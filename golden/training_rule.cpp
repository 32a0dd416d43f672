#include "golden/training_rule.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/adamw.hpp"
#include "common/tolerances.hpp"
#include "distributed/single_process_communicator.hpp"
#include "distributed/step_checks.hpp"
#include "golden/compare_rules.hpp"
#include "reference/compare.hpp"
#include "reference/drafter_problem.hpp"

namespace dflash {
namespace {

// The displacement's signs: any fixed stream (the rule must be the same on every run); a
// different seed moves the plain run's errors by a few percent of themselves.
constexpr std::uint64_t kDisplacementSeed = 0x5eed'b16f'0000'0001ull;

double largest_magnitude(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

double learning_rate(const TrainingConfig& c, std::int64_t t) {
  return learning_rate_at(t, c.learning_rate, c.min_learning_rate, c.warmup_steps, c.total_steps);
}

}  // namespace

double adam_update_bound(double beta1, double beta2, std::int64_t t) {
  const double n = double(t + 1);
  double geometric = 0;
  for (std::int64_t j = 0; j <= t; ++j) geometric += std::pow(beta1 * beta1 / beta2, double(j));
  return (1 - beta1) / (1 - std::pow(beta1, n)) * std::sqrt((1 - std::pow(beta2, n)) / (1 - beta2)) *
         std::sqrt(geometric);
}

double adam_parameter_drift(const TrainingConfig& training, std::int64_t steps) {
  double drift = 0;
  for (std::int64_t t = 0; t < steps; ++t) {
    drift += 2 * learning_rate(training, t) * adam_update_bound(training.adam_beta1, training.adam_beta2, t);
  }
  return drift;
}

PlainTraining plain_bf16_training(MemoryTracker& tracker, const TrainingGolden& g, double relative_displacement) {
  SingleProcessCommunicator comm;
  const FlatLayout layout(g.config, 1, g.training.zero_stage);
  TrainingState state =
      make_training_state(tracker, g.config, g.training, comm, convert_parameters<double>(tracker, g.initial));
  std::mt19937_64 signs(kDisplacementSeed);
  PlainTraining plain;
  std::vector<StepMetrics> metrics;
  for (std::int64_t t = 0; t < g.steps; ++t) {
    const DrafterBatch<double>& batch = g.batches[static_cast<std::size_t>(t)];
    // The whole global batch as one rank's sequences from g = 0 (as run_reference_training's train_step).
    const DrafterStepOptions o = drafter_step_options(g.config, static_cast<std::uint32_t>(t), 0);
    const double W = drafter_weight_sum(g.config, batch, o);
    DrafterParameters<double> grads = make_drafter_parameters<double>(tracker, g.config, MemoryCategory::gradients);
    const DrafterOutputs<double> out =
        drafter_step_accumulate(tracker, g.config, state.params, g.frozen, batch, o, std::optional<double>(W), grads);
    std::map<std::string, double, std::less<>> largest;
    grads.for_each([&](const std::string& name, Tensor<double>& x) {
      const double m = largest_magnitude(x.values());
      largest[name] = m;
      for (std::int64_t i = 0; i < x.numel(); ++i) x[i] += (signs() & 1 ? 1.0 : -1.0) * relative_displacement * m;
    });
    const OptimizerStepResult applied = apply_optimizer_step(comm, layout, g.training, state.optimizer, grads, "none");
    write_flat(layout, state.params, 0, state.optimizer.master.span());
    const double coefficient = std::min(1.0, clip_coefficient(applied.grad_norm, g.training.max_grad_norm));
    for (const auto& [name, m] : largest) {
      double& G = plain.largest_clipped_gradient[name];
      G = std::max(G, coefficient * m);
    }
    const double sums[3] = {out.stats.loss, out.stats.ce, out.stats.kl};
    const std::int64_t counts[2] = {out.stats.correct, out.stats.valid_rows};
    metrics.push_back(step_metrics(t, sums, counts, W, applied.lr, applied.grad_norm, applied.clipped));
  }
  plain.results = training_golden_results(layout, state.optimizer.master.span(), state.optimizer.exp_avg.span(),
                                          state.optimizer.exp_avg_sq.span(), metrics);
  return plain;
}

std::map<std::string, double, std::less<>> bf16_training_golden_tolerances(const TrainingGolden& g) {
  const DrafterBatch<double>& first = g.batches.at(0);
  const std::int64_t T = g.config.max_anchors * g.config.block_size;
  // 2 x the plain bf16 step's error, per tensor, on the compare's measure.
  const double step = step_result_bound(CompareRule::bf16, g.config, first.num_sequences(), first.context_length(), T);
  MemoryTracker tracker;
  const PlainTraining plain = plain_bf16_training(tracker, g, step / 2);
  const double drift = adam_parameter_drift(g.training, g.steps);
  const double fp32 = adamw_fp32_bound(static_cast<int>(g.steps));

  std::map<std::string, double, std::less<>> tolerance;
  auto plain_error = [&](const std::string& name) {
    return relative_error(std::span<const double>(plain.results.at(name).values),
                          std::span<const double>(g.results.at(name).values));
  };
  for (const auto& [name, golden] : g.results) {
    const double largest = largest_magnitude(golden.values);
    if (name.starts_with("final/param/")) {
      // The Adam drift bound, plus fp32 rounding in units of |theta| + what the steps moved it by.
      tolerance[name] = drift / largest + fp32 * (largest + drift) / largest;
    } else if (name.starts_with("final/exp_avg/")) {
      const double G = plain.largest_clipped_gradient.at(name.substr(std::string_view("final/exp_avg/").size()));
      tolerance[name] = 2 * plain_error(name) + fp32 * (largest + G) / largest;
    } else if (name.starts_with("final/exp_avg_sq/")) {
      const double G = plain.largest_clipped_gradient.at(name.substr(std::string_view("final/exp_avg_sq/").size()));
      tolerance[name] = 2 * plain_error(name) + fp32 * (largest + G * G) / largest;
    } else if (name == "metrics/loss" || name == "metrics/ce" || name == "metrics/kl" || name == "metrics/accuracy") {
      // The plain run computes each step's loss exactly at its parameters: the bf16 step's own
      // error of it is added.
      tolerance[name] = 2 * plain_error(name) + step;
    } else if (name == "metrics/grad_norm") {
      tolerance[name] = 2 * plain_error(name);  // the plain run's norm is of its displaced gradient
    } else {
      tolerance[name] = 0;  // lr, weight_sum, tokens; clipped below
    }
  }
  // The flag may differ only where a step's norm is within the norm's bound of max_grad_norm.
  const std::vector<double>& norms = g.results.at("metrics/grad_norm").values;
  const double norm_bound = tolerance.at("metrics/grad_norm") * largest_magnitude(norms);
  for (double n : norms) {
    if (std::abs(n - g.training.max_grad_norm) <= norm_bound) tolerance["metrics/clipped"] = 1;
  }
  return tolerance;
}

}  // namespace dflash
