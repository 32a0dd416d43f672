// The loss-head part of the verification matrix: every policy and chunk size against the
// unchunked oracle (1e-12, SPEC §10), the double result against 50-digit arithmetic, and the
// analytic gradients against 50-digit central differences (1e-9).
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/tolerances.hpp"
#include "reference/finite_difference.hpp"
#include "reference/loss_head.hpp"
#include "reference/loss_head_compare.hpp"
#include "reference/loss_head_mp50.hpp"
#include "reference/loss_head_problem.hpp"
#include "verify/rows.hpp"

namespace dflash {
namespace {

struct LossHeadCase {
  std::string name;
  LossHeadProblemSpec spec;
  LossHeadOptions options;
};

std::vector<LossHeadCase> loss_head_cases() {
  std::vector<LossHeadCase> cases;
  auto add = [&](std::string name, LossHeadProblemSpec spec, double tau, double hard = 0.85, double soft = 0.15) {
    LossHeadOptions o;
    o.temperature = tau;
    o.hard_weight = hard;
    o.soft_weight = soft;
    o.lm_head_grad = true;
    cases.push_back({std::move(name), spec, o});
  };
  add("T13-H8-V37", {.rows = 13, .hidden = 8, .vocab = 37, .seed = 11}, 1.0);
  add("T9-H6-V50-tau0.5", {.rows = 9, .hidden = 6, .vocab = 50, .seed = 12, .teacher_scale = 2.0}, 0.5, 0.7, 0.3);
  add("T7-H5-V41-tau3-zeros",
      {.rows = 7, .hidden = 5, .vocab = 41, .seed = 13, .zero_weight_fraction = 0.3, .zero_lm_head_fraction = 0.3},
      3.0);
  add("T6-H4-V29-extreme", {.rows = 6, .hidden = 4, .vocab = 29, .seed = 14, .logit_scale = 1e4}, 0.05);
  add("T5-H4-V23-W0", {.rows = 5, .hidden = 4, .vocab = 23, .seed = 15, .all_weights_zero = true}, 1.0);
  return cases;
}

std::vector<std::int64_t> chunk_sizes(std::int64_t T) { return {1, 3, T, T + 5}; }

}  // namespace

std::vector<VerifyRow> verify_loss_head_rows() {
  std::vector<VerifyRow> rows;
  for (const LossHeadCase& c : loss_head_cases()) {
    MemoryTracker data_tracker;
    const LossHeadProblem<double> p = make_loss_head_problem<double>(data_tracker, c.spec);
    MemoryTracker oracle_tracker;
    const LossHeadResult<double> oracle =
        hybrid_loss_unchunked(oracle_tracker, c.options, p.hidden, p.targets(), p.weight_sum);
    const GradientFloors floors = gradient_floors(c.options, p.hidden, p.targets(), p.weight_sum);
    const auto name = [&](std::string variant) {
      return RowName{.group = "loss_head", .case_name = c.name, .variant = std::move(variant)};
    };

    // Every policy x chunk size against the unchunked oracle.
    for (LossPolicy policy : kAllLossPolicies) {
      for (std::int64_t chunk : chunk_sizes(c.spec.rows)) {
        if (policy == LossPolicy::materialize && chunk != c.spec.rows) continue;  // one chunk by definition
        LossHeadOptions o = c.options;
        o.policy = policy;
        o.chunk_rows = chunk;
        MemoryTracker tracker;
        const LossHeadResult<double> r = run_loss_head(tracker, o, p.hidden, p.targets(), p.weight_sum);
        const std::string variant = std::string(loss_policy_name(policy)) +
                                    (policy == LossPolicy::materialize ? "" : "/c" + std::to_string(chunk));
        rows.push_back(tolerance_row(name(variant), {.error = loss_head_result_error(r, oracle, floors),
                                                     .tolerance = kReferenceTolerance,
                                                     .peak_bytes = tracker.peak_total(),
                                                     .note = "vs unchunked oracle"}));
      }
    }

    // Double against 50-digit arithmetic (the same problem, exactly converted).
    MemoryTracker mp_tracker;
    const LossHeadProblem<Mp50> pm = convert_problem<Mp50>(mp_tracker, p);
    const LossHeadResult<Mp50> exact =
        hybrid_loss_unchunked(mp_tracker, c.options, pm.hidden, pm.targets(), pm.weight_sum);
    {
      LossHeadOptions o = c.options;
      o.policy = LossPolicy::chunk_recompute;
      o.chunk_rows = 4;
      MemoryTracker tracker;
      const LossHeadResult<double> r = run_loss_head(tracker, o, p.hidden, p.targets(), p.weight_sum);
      rows.push_back(
          tolerance_row(name("chunk_recompute/c4 vs 50-digit"), {.error = loss_head_result_error(r, exact, floors),
                                                                 .tolerance = kReferenceTolerance,
                                                                 .peak_bytes = tracker.peak_total(),
                                                                 .note = "double vs cpp_bin_float_50"}));
    }

    // Analytic gradients against 50-digit central differences along random directions.
    LossHeadProblem<Mp50> fm = convert_problem<Mp50>(mp_tracker, p);
    LossHeadOptions fo = c.options;
    fo.lm_head_grad = false;
    // The teacher's logits are constants (the target's distribution): perturbing W_lm must move
    // the student's logits only, so the teacher keeps its own copy of the head.
    const Tensor<Mp50> teacher_head = fm.lm_head.clone(MemoryCategory::frozen);
    LossHeadTargets<Mp50> targets = fm.targets();
    targets.teacher_lm_head = &teacher_head;
    const std::function<Mp50()> loss = [&] {
      MemoryTracker t;
      return loss_head_forward(t, fo, fm.hidden, targets, fm.weight_sum).stats.loss;
    };
    const Mp50 eps("1e-20");
    const double noise = 1e-25 * std::max(1.0, std::abs(static_cast<double>(loss())));  // quotient noise
    double worst = 0;
    for (int d = 0; d < 3; ++d) {
      const bool wrt_head = d == 2;
      Tensor<Mp50>& x = wrt_head ? fm.lm_head : fm.hidden;
      const Tensor<double>& g = wrt_head ? *oracle.lm_head_grad : oracle.hidden_grad;
      const std::vector<double> dir = random_direction(x.numel(), c.spec.seed * 31 + d);
      const Mp50 fd = central_difference(loss, x, dir, eps);
      const DirectionalCheck a = directional_derivative(std::span(g.data(), g.values().size()), std::span(dir),
                                                        wrt_head ? floors.lm_head : floors.hidden);
      worst = std::max(worst, directional_error(a, static_cast<double>(fd), noise));
    }
    rows.push_back(tolerance_row(
        name("gradient vs 50-digit FD"),
        {.error = worst, .tolerance = kFiniteDifferenceTolerance, .note = "dL/dY (2 directions), dL/dW_lm (1)"}));
  }
  return rows;
}

}  // namespace dflash
