#include "planner/plan_category.hpp"

#include "planner/checked_bytes.hpp"

namespace dflash {

std::string_view plan_category_name(PlanCategory category) {
  switch (category) {
    case PlanCategory::parameters:
      return "parameters";
    case PlanCategory::frozen:
      return "frozen";
    case PlanCategory::master_weights:
      return "master_weights";
    case PlanCategory::gradients:
      return "gradients";
    case PlanCategory::optimizer_state:
      return "optimizer_state";
    case PlanCategory::inputs:
      return "inputs";
    case PlanCategory::saved:
      return "saved";
    case PlanCategory::loss_saved:
      return "loss_saved";
    case PlanCategory::transient:
      return "transient";
    case PlanCategory::outputs:
      return "outputs";
    case PlanCategory::communication:
      return "communication";
  }
  return "unknown";
}

std::string_view plan_category_label(PlanCategory category) {
  switch (category) {
    case PlanCategory::parameters:
      return "trainable parameters";
    case PlanCategory::frozen:
      return "frozen parameters (embedding, lm_head)";
    case PlanCategory::master_weights:
      return "master weights";
    case PlanCategory::gradients:
      return "gradients";
    case PlanCategory::optimizer_state:
      return "optimizer state (AdamW m, v)";
    case PlanCategory::inputs:
      return "batch inputs";
    case PlanCategory::saved:
      return "saved activations (trunk)";
    case PlanCategory::loss_saved:
      return "saved activations (loss head)";
    case PlanCategory::transient:
      return "transient workspace";
    case PlanCategory::outputs:
      return "per-row outputs";
    case PlanCategory::communication:
      return "communication buffers";
  }
  return "unknown";
}

MemoryCategory tracker_category(PlanCategory category) {
  switch (category) {
    case PlanCategory::parameters:
      return MemoryCategory::parameters;
    case PlanCategory::frozen:
      return MemoryCategory::frozen;
    case PlanCategory::master_weights:
      return MemoryCategory::optimizer;
    case PlanCategory::gradients:
      return MemoryCategory::gradients;
    case PlanCategory::optimizer_state:
      return MemoryCategory::optimizer;
    case PlanCategory::inputs:
      return MemoryCategory::inputs;
    case PlanCategory::saved:
      return MemoryCategory::saved;
    case PlanCategory::loss_saved:
      return MemoryCategory::loss_saved;
    case PlanCategory::transient:
      return MemoryCategory::transient;
    case PlanCategory::outputs:
      return MemoryCategory::outputs;
    case PlanCategory::communication:
      return MemoryCategory::communication;
  }
  return MemoryCategory::transient;
}

std::int64_t CategoryBytes::total() const {
  std::int64_t sum = 0;
  for (std::int64_t b : bytes) sum = checked_sum(sum, b);
  return sum;
}

std::int64_t CategoryBytes::tracker_bytes(MemoryCategory category) const {
  std::int64_t sum = 0;
  for (PlanCategory c : kAllPlanCategories) {
    if (tracker_category(c) == category) sum = checked_sum(sum, (*this)[c]);
  }
  return sum;
}

}  // namespace dflash
