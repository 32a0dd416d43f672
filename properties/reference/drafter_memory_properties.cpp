// The trunk's saved activations (MemoryCategory::saved) per trunk policy: the tracker's peak is
// exactly a closed-form count of what the policy keeps (boundaries + one live layer or segment),
// and exactly what reference/trunk_memory.hpp tells the memory planner.
#include <algorithm>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/reference/drafter_cases.hpp"
#include "reference/trunk_memory.hpp"

namespace dflash {
namespace {

// Elements, written out from the tensors the layer keeps (reference/drafter_layer.hpp), not from
// the list in trunk_memory.cpp.
std::int64_t closed_form_peak(const DrafterDims& m, TrunkPolicy policy, std::int64_t k) {
  const std::int64_t S = m.S, T = m.T, H = m.H, I = m.I, nh = m.nh, nkv = m.nkv, d = m.d, L = m.L;
  const std::int64_t context = 2 * S * H + S;               // fc_out, hidden_norm rstd, C
  const std::int64_t final_norm = T * H + T;                // X_L, rstd
  const std::int64_t boundary = T * H;                      // one layer input
  const std::int64_t layer = 2 * T + 3 * T * H              // input_rstd, post_rstd; u, x_mid, v
                             + 3 * T * nh * d + 2 * T * nh  // q_proj, q, attn_out; q_rstd, attn_lse
                             + 3 * S * nkv * d + S * nkv    // k_ctx_proj, k_ctx, v_ctx; k_ctx_rstd
                             + 3 * T * nkv * d + T * nkv    // k_blk_proj, k_blk, v_blk; k_blk_rstd
                             + 3 * T * I;                   // gate, up, act
  switch (policy) {
    case TrunkPolicy::none:
      return context + L * boundary + L * layer + final_norm;
    case TrunkPolicy::per_layer:
      return context + L * boundary + std::max(final_norm, layer);
    case TrunkPolicy::every_k: {
      const std::int64_t segments = (L + k - 1) / k;
      std::int64_t peak = context + segments * boundary + final_norm;
      for (std::int64_t j = 0; j < segments; ++j) {
        const std::int64_t layers = std::min(k, L - j * k);
        peak = std::max(peak, context + (j + 1) * boundary + layers * layer + (layers - 1) * boundary);
      }
      return peak;
    }
  }
  return -1;
}

RC_GTEST_PROP(DrafterMemory, SavedPeakIsTheClosedFormCountOfWhatThePolicyKeeps, ()) {
  const DrafterCase c =
      *gen_drafter_case({.max_hidden = 8, .max_intermediate = 10, .max_layers = 5, .max_context = 12});
  DrafterProblem p(c);
  for (TrunkPolicy policy : kAllTrunkPolicies) {
    DrafterStepOptions o = c.options;
    o.trunk_policy = policy;
    MemoryTracker t;
    {
      const DrafterStepResult<double> r = drafter_step(t, c.config, p.params, p.frozen, p.batch, o);
      const DrafterDims dims = DrafterDims::of(c.config, p.batch.context_length(), r.outputs.anchors.dim(1));
      const auto expected =
          static_cast<std::size_t>(closed_form_peak(dims, policy, o.checkpoint_every)) * sizeof(double);
      RC_LOG() << trunk_policy_name(policy) << "/" << o.checkpoint_every << ": peak " << t.peak(MemoryCategory::saved)
               << " B, closed form " << expected << " B\n";
      RC_ASSERT(t.peak(MemoryCategory::saved) == expected);
      const TrunkSavedPlan plan = trunk_saved_plan(dims, policy, o.checkpoint_every);
      RC_ASSERT(static_cast<std::size_t>(plan.peak_elements) * sizeof(double) == expected);
      RC_ASSERT(t.current(MemoryCategory::saved) == 0u);  // nothing kept outlives the step
    }
  }
}

}  // namespace
}  // namespace dflash
