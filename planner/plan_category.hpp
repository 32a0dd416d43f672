// The categories a memory plan reports (SPEC §8). They refine the tracker's categories in one
// place only: the tracker's `optimizer` holds both the fp32 master weights and the AdamW moments,
// which a plan shows apart because they shard differently from nothing else (and ZeRO-1 shards
// both). Every other plan category is exactly one tracker category, so a plan and a measured
// peak are compared category by category.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "reference/memory_tracker.hpp"

namespace dflash {

enum class PlanCategory : int {
  parameters,       // trainable parameters
  frozen,           // frozen parameters: embedding, lm_head
  master_weights,   // full-precision copy of the trainable parameters
  gradients,        // parameter gradients, and the input gradients handed back
  optimizer_state,  // AdamW first and second moments
  inputs,           // batch inputs: tokens, target features, teacher hidden rows
  saved,            // trunk activations kept from forward until backward
  loss_saved,       // what the loss head keeps from forward until backward
  transient,        // workspace living within one phase
  outputs,          // per-row results (lse, token loss)
  communication,    // collective buffers
};
inline constexpr int kPlanCategoryCount = 11;

inline constexpr std::array<PlanCategory, kPlanCategoryCount> kAllPlanCategories = {
    PlanCategory::parameters,      PlanCategory::frozen,  PlanCategory::master_weights, PlanCategory::gradients,
    PlanCategory::optimizer_state, PlanCategory::inputs,  PlanCategory::saved,          PlanCategory::loss_saved,
    PlanCategory::transient,       PlanCategory::outputs, PlanCategory::communication};

std::string_view plan_category_name(PlanCategory category);   // JSON key, e.g. "loss_saved"
std::string_view plan_category_label(PlanCategory category);  // table label, e.g. "saved activations (loss head)"
MemoryCategory tracker_category(PlanCategory category);

// Bytes per category, for one GPU.
struct CategoryBytes {
  std::array<std::int64_t, kPlanCategoryCount> bytes{};

  std::int64_t& operator[](PlanCategory c) { return bytes[static_cast<std::size_t>(c)]; }
  std::int64_t operator[](PlanCategory c) const { return bytes[static_cast<std::size_t>(c)]; }
  // Summing category peaks bounds the true peak from above: phases whose peaks never coincide
  // (forward transient, backward gradients) are still added, which is the plan's stated slack.
  std::int64_t total() const;
  // The plan's bytes for one tracker category (master weights + optimizer state for `optimizer`).
  std::int64_t tracker_bytes(MemoryCategory category) const;
};

}  // namespace dflash
