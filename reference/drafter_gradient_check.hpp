// The double drafter's analytic gradients against 50-digit central differences (SPEC §10): one
// random direction per trainable tensor and one for the target features (two 50-digit forwards
// each), plus a sample of single coordinates. Dropout masks are a fixed function of their
// coordinates, so the loss is a smooth function of the parameters with dropout on as well.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "reference/drafter.hpp"
#include "reference/drafter_mp50.hpp"
#include "reference/drafter_problem.hpp"
#include "reference/finite_difference.hpp"

namespace dflash {

struct GradientCheck {
  double worst = 0;        // largest error seen (see below)
  std::string worst_what;  // which tensor / coordinate it was
  int evaluations = 0;     // finite differences taken
};

struct GradientCheckOptions {
  std::uint64_t seed = 1;  // directions and coordinates
  int coordinates = 3;     // single coordinates, on top of one direction per tensor
};

namespace gradient_check_detail {
// A direction's error is directional_error (reference/finite_difference.hpp): |g.d - fd| over
// sum |g_i d_i|. A coordinate's error is relative to the tensor's largest gradient entry (the
// norm-wise measure of reference/compare.hpp: one entry may be a near-cancelling sum).
inline double coordinate_error(double analytic, double fd, double scale, double fd_noise) {
  return directional_error(DirectionalCheck{analytic, scale}, fd, fd_noise);
}
}  // namespace gradient_check_detail

// `analytic` is drafter_step's result for (config, params, frozen, batch, options) in double.
inline GradientCheck check_drafter_gradients(const DrafterConfig& config, const DrafterParameters<double>& params,
                                             const FrozenWeights<double>& frozen, const DrafterBatch<double>& batch,
                                             const DrafterStepOptions& options,
                                             const DrafterStepResult<double>& analytic,
                                             const GradientCheckOptions& check_options) {
  using gradient_check_detail::coordinate_error;
  MemoryTracker tracker;
  DrafterParameters<Mp50> p = convert_parameters<Mp50>(tracker, params);
  const FrozenWeights<Mp50> f = convert_frozen<Mp50>(tracker, frozen);
  DrafterBatch<Mp50> b = convert_batch<Mp50>(tracker, batch);
  // The anchors the double step used, given explicitly (sampling would give the same ones).
  b.anchors.emplace(copy_tensor(tracker, analytic.outputs.anchors));
  b.keep.emplace(copy_tensor(tracker, analytic.outputs.keep));
  const std::function<Mp50()> loss = [&] {
    MemoryTracker t;
    return drafter_forward(t, config, p, f, b, options).stats.loss;
  };
  const Mp50 eps("1e-20");
  // The 50-digit quotient's own noise (see directional_error).
  const double fd_noise = 1e-25 * std::max(1.0, std::abs(analytic.outputs.stats.loss));

  GradientCheck check;
  auto record = [&](double err, const std::string& what) {
    ++check.evaluations;
    if (std::isnan(err)) err = std::numeric_limits<double>::infinity();  // a NaN gradient or quotient fails
    if (err >= check.worst) {
      check.worst = err;
      check.worst_what = what;
    }
  };
  // Every tensor checked: (name, 50-digit tensor to perturb, double gradient).
  std::vector<std::string> names;
  std::vector<Tensor<Mp50>*> targets;
  std::vector<const Tensor<double>*> grads;
  p.for_each([&](const std::string& name, Tensor<Mp50>& t) {
    names.push_back(name);
    targets.push_back(&t);
  });
  analytic.grads.for_each([&](const std::string&, const Tensor<double>& g) { grads.push_back(&g); });
  names.push_back("target_features");
  targets.push_back(&b.target_features);
  grads.push_back(&analytic.target_features_grad);
  for (std::size_t t = 0; t < targets.size(); ++t) {
    const std::vector<double> dir = random_direction(targets[t]->numel(), check_options.seed * 1000 + t);
    const double fd = static_cast<double>(central_difference(loss, *targets[t], dir, eps));
    const DirectionalCheck a =
        directional_derivative(std::span(grads[t]->data(), grads[t]->values().size()), std::span<const double>(dir));
    record(directional_error(a, fd, fd_noise), names[t] + " (random direction)");
  }
  CounterRng pick(check_options.seed, 0xC0);
  for (int c = 0; c < check_options.coordinates; ++c) {
    const auto t = static_cast<std::size_t>(pick.below(static_cast<std::int64_t>(targets.size())));
    const std::int64_t i = pick.below(targets[t]->numel());
    std::vector<double> dir(static_cast<std::size_t>(targets[t]->numel()), 0.0);
    dir[static_cast<std::size_t>(i)] = 1.0;
    const double fd = static_cast<double>(central_difference(loss, *targets[t], dir, eps));
    double scale = 0;
    for (const double g : grads[t]->values()) scale = std::max(scale, std::abs(g));
    record(coordinate_error((*grads[t])[i], fd, scale, fd_noise), str(names[t], "[", i, "]"));
  }
  return check;
}

}  // namespace dflash
