// Trunk policies x loss-head policies (SPEC §7), and dropout replay under recomputation (SPEC §6).
#include <map>
#include <tuple>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/reference/drafter_cases.hpp"
#include "reference/drafter_compare.hpp"

namespace dflash {
namespace {

// Every trunk policy (every_k with the case's k) with every loss-head policy gives bitwise the
// same loss, outputs and gradients: a recomputed layer runs the same operations in the same
// order on the same bits, and the loss-head policies share their row arithmetic.
RC_GTEST_PROP(DrafterPolicies, EveryTrunkAndLossPolicyGivesBitwiseTheSameStep, ()) {
  const DrafterCase c = *gen_drafter_case({.max_hidden = 8, .max_intermediate = 8, .max_layers = 4, .max_context = 12});
  DrafterProblem p(c);
  DrafterStepOptions o = c.options;
  o.trunk_policy = TrunkPolicy::none;
  o.loss_policy = LossPolicy::materialize;
  const DrafterStepResult<double> reference = p.step(c, o);
  for (TrunkPolicy trunk : kAllTrunkPolicies) {
    for (LossPolicy loss : kAllLossPolicies) {
      o.trunk_policy = trunk;
      o.loss_policy = loss;
      RC_ASSERT(drafter_steps_identical(p.step(c, o), reference));
    }
  }
}

using DrawKey = std::tuple<std::uint32_t, std::uint32_t, DropoutSite>;  // (sequence, layer, site)
using Mask = std::map<std::uint64_t, bool>;                             // element -> kept

// With dropout on, the masks a checkpointed layer regenerates (recompute pass) and the masks the
// backward regenerates are bitwise the masks of the first forward; and the recomputing policy's
// gradients are bitwise those of the policy that keeps everything.
RC_GTEST_PROP(DrafterPolicies, RecomputedDropoutMasksReplayTheForwardBitwise, ()) {
  DrafterCase c = *gen_drafter_case({.max_hidden = 6, .max_intermediate = 6, .max_layers = 3, .max_context = 10});
  c.config.attention_dropout = *rc::gen::element(0.1, 0.5);
  c.config.hidden_dropout = *rc::gen::element(0.1, 0.5);
  c.options.trunk_policy = *rc::gen::element(TrunkPolicy::per_layer, TrunkPolicy::every_k);
  DrafterProblem p(c);

  std::map<DropoutPass, std::map<DrawKey, Mask>> draws;
  const DropoutObserver observer = [&](const DropoutDraw& d) {
    Mask& mask = draws[d.pass][{d.sequence, d.layer, d.site}];
    RC_ASSERT(mask.emplace(d.element, d.kept).second);  // each element drawn once per pass
  };
  DrafterStepOptions o = c.options;
  o.dropout_observer = &observer;
  const DrafterStepResult<double> recomputed = p.step(c, o);

  const auto& forward = draws[DropoutPass::forward];
  RC_ASSERT(!forward.empty());
  // Every layer is rebuilt once, so the recompute pass draws exactly the forward's masks.
  RC_ASSERT(draws[DropoutPass::recompute] == forward);
  RC_ASSERT(draws[DropoutPass::backward] == forward);
  std::size_t kept = 0, dropped = 0;
  for (const auto& [key, mask] : forward) {
    for (const auto& [element, k] : mask) (k ? kept : dropped) += 1;
  }
  RC_LOG() << kept << " kept, " << dropped << " dropped\n";
  RC_ASSERT(kept > 0);

  DrafterStepOptions keep_all = c.options;
  keep_all.trunk_policy = TrunkPolicy::none;
  RC_ASSERT(drafter_steps_identical(p.step(c, keep_all), recomputed));
}

}  // namespace
}  // namespace dflash
