// The drafter part of the verification matrix, on configs/tiny.json with dropout off and on:
// every trunk policy x loss-head policy against (none, materialize) (bitwise expected; SPEC §10's
// 1e-12 where the order differs), each trunk policy's saved-activation peak against the plan of
// reference/trunk_memory.hpp (exact), the dropout masks of recomputed layers against the first
// forward's (exact), the double forward against 50-digit arithmetic (1e-12) and the analytic
// gradients against 50-digit central differences (1e-9).
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/tolerances.hpp"
#include "reference/drafter.hpp"
#include "reference/drafter_compare.hpp"
#include "reference/drafter_gradient_check.hpp"
#include "reference/drafter_mp50.hpp"
#include "reference/drafter_problem.hpp"
#include "reference/trunk_memory.hpp"
#include "verify/rows.hpp"

namespace dflash {
namespace {

struct DrafterVerifyCase {
  std::string name;
  DrafterConfig config;
  DrafterBatchSpec batch;
};

std::vector<DrafterVerifyCase> drafter_cases() {
  const DrafterConfig tiny = load_drafter_config(std::filesystem::path(DFLASH_CONFIG_DIR) / "tiny.json");
  DrafterConfig dropout = tiny;
  dropout.attention_dropout = 0.1;
  dropout.hidden_dropout = 0.1;
  const DrafterBatchSpec batch{.sequences = 2, .context_length = 16, .seed = 41, .mask_hole_fraction = 0.15};
  return {{"tiny/dropout-off", tiny, batch}, {"tiny/dropout-0.1", dropout, batch}};
}

std::string policy_label(const DrafterStepOptions& o) {
  std::string trunk(trunk_policy_name(o.trunk_policy));
  if (o.trunk_policy == TrunkPolicy::every_k) trunk += std::to_string(o.checkpoint_every);
  std::string loss(loss_policy_name(o.loss_policy));
  if (o.loss_policy != LossPolicy::materialize) loss += "/c" + std::to_string(o.loss_chunk_rows);
  return trunk + " x " + loss;
}

// Draws of the recompute and backward passes that differ from the first forward's, per draw
// of the forward (0 when every mask is replayed bitwise).
double replay_mismatch(const DrafterConfig& config, const DrafterParameters<double>& params,
                       const FrozenWeights<double>& frozen, const DrafterBatch<double>& batch, DrafterStepOptions o,
                       std::size_t& forward_draws) {
  using Key = std::tuple<std::uint32_t, std::uint32_t, DropoutSite, std::uint64_t>;
  std::map<DropoutPass, std::map<Key, bool>> draws;
  const DropoutObserver observer = [&](const DropoutDraw& d) {
    draws[d.pass][{d.sequence, d.layer, d.site, d.element}] = d.kept;
  };
  o.dropout_observer = &observer;
  MemoryTracker tracker;
  drafter_step(tracker, config, params, frozen, batch, o);
  const auto& forward = draws[DropoutPass::forward];
  forward_draws = forward.size();
  std::size_t mismatches = 0;
  for (DropoutPass pass : {DropoutPass::recompute, DropoutPass::backward}) {
    for (const auto& [key, kept] : forward) {
      const auto it = draws[pass].find(key);
      mismatches += it == draws[pass].end() || it->second != kept;
    }
    mismatches += draws[pass].size() > forward.size() ? draws[pass].size() - forward.size() : 0;
  }
  return forward.empty() ? 1.0 : double(mismatches) / double(forward.size());
}

}  // namespace

std::vector<VerifyRow> verify_drafter_rows() {
  std::vector<VerifyRow> rows;
  for (const DrafterVerifyCase& c : drafter_cases()) {
    MemoryTracker data;
    const DrafterParameters<double> params = init_drafter_parameters<double>(data, c.config, 5, 0.2);
    const FrozenWeights<double> frozen = init_frozen_weights<double>(data, c.config, 6);
    const DrafterBatch<double> batch = make_drafter_batch<double>(data, c.config, c.batch);
    DrafterStepOptions base = drafter_step_options(c.config, 12, 3);
    base.trunk_policy = TrunkPolicy::none;
    base.loss_policy = LossPolicy::materialize;
    MemoryTracker reference_tracker;
    const DrafterStepResult<double> reference = drafter_step(reference_tracker, c.config, params, frozen, batch, base);
    const DrafterDims dims = DrafterDims::of(c.config, c.batch.context_length, reference.outputs.anchors.dim(1));
    const auto name = [&](std::string variant) {
      return RowName{.group = "drafter", .case_name = c.name, .variant = std::move(variant)};
    };

    for (TrunkPolicy trunk : kAllTrunkPolicies) {
      for (LossPolicy loss : kAllLossPolicies) {
        DrafterStepOptions o = base;
        o.trunk_policy = trunk;
        o.checkpoint_every = 2;
        o.loss_policy = loss;
        MemoryTracker tracker;
        const DrafterStepResult<double> r = drafter_step(tracker, c.config, params, frozen, batch, o);
        const bool identical = drafter_steps_identical(r, reference);
        rows.push_back(tolerance_row(name(policy_label(o)), {.error = drafter_step_error(r, reference),
                                                             .tolerance = kReferenceTolerance,
                                                             .peak_bytes = tracker.peak_total(),
                                                             .note = identical ? "bitwise equal to none x materialize"
                                                                               : "vs none x materialize"}));
        if (loss != LossPolicy::chunk_recompute) continue;
        const auto plan = trunk_saved_plan(dims, trunk, o.checkpoint_every);
        const double planned = double(plan.peak_elements) * sizeof(double);
        const double measured = double(tracker.peak(MemoryCategory::saved));
        rows.push_back(
            exact_row(name(policy_label(o) + " saved peak"), {.mismatch = std::abs(measured - planned) / planned,
                                                              .peak_bytes = tracker.peak(MemoryCategory::saved),
                                                              .note = "tracker vs reference/trunk_memory plan"}));
      }
    }

    if (c.config.attention_dropout > 0 || c.config.hidden_dropout > 0) {
      for (TrunkPolicy trunk : {TrunkPolicy::per_layer, TrunkPolicy::every_k}) {
        DrafterStepOptions o = base;
        o.trunk_policy = trunk;
        o.checkpoint_every = 2;
        std::size_t draws = 0;
        const double mismatch = replay_mismatch(c.config, params, frozen, batch, o, draws);
        rows.push_back(
            exact_row(name(policy_label(o) + " dropout replay"),
                      {.mismatch = mismatch, .note = str(draws, " forward draws replayed by recompute and backward")}));
      }
    }

    {
      MemoryTracker t;
      const DrafterOutputs<Mp50> exact =
          drafter_forward(t, c.config, convert_parameters<Mp50>(t, params), convert_frozen<Mp50>(t, frozen),
                          convert_batch<Mp50>(t, batch), base);
      rows.push_back(
          tolerance_row(name("forward vs 50-digit"), {.error = drafter_outputs_error(reference.outputs, exact),
                                                      .tolerance = kReferenceTolerance,
                                                      .note = "loss, ce, kl, Y, lse, token losses"}));
    }

    // The finite differences on one shorter sequence (a 50-digit forward costs ~1 us per
    // multiply-add): explicit anchors with an invalid block.
    {
      MemoryTracker t;
      const DrafterBatch<double> small = make_drafter_batch<double>(t, c.config,
                                                                    {.sequences = 1,
                                                                     .context_length = 12,
                                                                     .seed = 43,
                                                                     .explicit_anchors = true,
                                                                     .anchor_slots = 3,
                                                                     .invalid_block_fraction = 0.25});
      const DrafterStepResult<double> r = drafter_step(t, c.config, params, frozen, small, base);
      const GradientCheck check = check_drafter_gradients(c.config, params, frozen, small, base, r, {.seed = 7});
      rows.push_back(tolerance_row(
          name("gradients vs 50-digit FD"),
          {.error = check.worst,
           .tolerance = kFiniteDifferenceTolerance,
           .note =
               str(check.evaluations, " differences (every tensor, dL/dF, coordinates); worst: ", check.worst_what)}));
    }
  }
  return rows;
}

}  // namespace dflash
