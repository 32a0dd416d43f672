#include "reference/trunk_memory.hpp"

#include <algorithm>

namespace dflash {

namespace {
std::int64_t total_elements(const std::vector<SavedTensor>& tensors) {
  std::int64_t n = 0;
  for (const SavedTensor& t : tensors) n += t.elements();
  return n;
}

SavedTensor layer_input(const DrafterDims& m, std::int64_t layer) {
  return {"layers." + std::to_string(layer) + ".input", {m.T, m.H}};
}
}  // namespace

std::vector<SavedTensor> layer_activation_tensors(const DrafterDims& m, std::int64_t layer) {
  const std::string at = "layers." + std::to_string(layer) + ".";
  return {{at + "input_rstd", {m.T}},
          {at + "u", {m.T, m.H}},
          {at + "q_proj", {m.T, m.q_width()}},
          {at + "q_rstd", {m.T, m.nh}},
          {at + "q", {m.T, m.q_width()}},
          {at + "k_ctx_proj", {m.S, m.kv_width()}},
          {at + "k_ctx_rstd", {m.S, m.nkv}},
          {at + "k_ctx", {m.S, m.kv_width()}},
          {at + "v_ctx", {m.S, m.kv_width()}},
          {at + "k_blk_proj", {m.T, m.kv_width()}},
          {at + "k_blk_rstd", {m.T, m.nkv}},
          {at + "k_blk", {m.T, m.kv_width()}},
          {at + "v_blk", {m.T, m.kv_width()}},
          {at + "attn_lse", {m.T, m.nh}},
          {at + "attn_out", {m.T, m.q_width()}},
          {at + "x_mid", {m.T, m.H}},
          {at + "post_rstd", {m.T}},
          {at + "v", {m.T, m.H}},
          {at + "gate", {m.T, m.I}},
          {at + "up", {m.T, m.I}},
          {at + "act", {m.T, m.I}}};
}

TrunkSavedPlan trunk_saved_plan(const DrafterDims& m, TrunkPolicy policy, std::int64_t checkpoint_every) {
  const std::int64_t segment = trunk_segment_length(policy, checkpoint_every, m.L);
  TrunkSavedPlan plan;
  plan.kept = {{"context.fc_out", {m.S, m.H}}, {"context.hidden_norm_rstd", {m.S}}, {"context", {m.S, m.H}}};
  const std::int64_t context = total_elements(plan.kept);
  for (std::int64_t l = 0; l < m.L; ++l) {
    if (policy == TrunkPolicy::none || l % segment == 0) plan.kept.push_back(layer_input(m, l));
    if (policy == TrunkPolicy::none) {
      for (SavedTensor& t : layer_activation_tensors(m, l)) plan.kept.push_back(std::move(t));
    }
  }
  plan.kept.push_back({"final.input", {m.T, m.H}});
  plan.kept.push_back({"final.rstd", {m.T}});
  plan.peak_elements = total_elements(plan.kept);  // the end of forward
  if (policy == TrunkPolicy::none) return plan;

  // Backward frees the final norm's input first, then rebuilds the segments last to first; while
  // segment j is live, the boundaries of segments 0..j are still kept.
  std::int64_t largest = -1;
  for (std::int64_t start = 0, j = 0; start < m.L; start += segment, ++j) {
    std::vector<SavedTensor> live;
    for (std::int64_t l = start; l < std::min(start + segment, m.L); ++l) {
      if (l > start) live.push_back(layer_input(m, l));
      for (SavedTensor& t : layer_activation_tensors(m, l)) live.push_back(std::move(t));
    }
    const std::int64_t live_elements = total_elements(live);
    plan.peak_elements = std::max(plan.peak_elements, context + (j + 1) * m.T * m.H + live_elements);
    if (live_elements > largest) {
      largest = live_elements;
      plan.largest_live = std::move(live);
    }
  }
  return plan;
}

}  // namespace dflash
