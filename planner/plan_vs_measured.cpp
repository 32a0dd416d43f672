#include "planner/plan_vs_measured.hpp"

#include "io/errors.hpp"

namespace dflash {

std::vector<CategoryComparison> compare_plan_with_tracker(const CategoryBytes& plan, const MemoryTracker& tracker) {
  std::vector<CategoryComparison> out;
  for (int i = 0; i < kMemoryCategoryCount; ++i) {
    const auto category = static_cast<MemoryCategory>(i);
    out.push_back({category, plan.tracker_bytes(category), static_cast<std::int64_t>(tracker.peak(category))});
  }
  return out;
}

std::string comparison_report(const std::vector<CategoryComparison>& comparisons) {
  std::string out;
  for (const CategoryComparison& c : comparisons) {
    out += str(category_name(c.category), ": planned ", c.planned, " B, measured ", c.measured, " B (excess ",
               c.excess(), " B)\n");
  }
  return out;
}

}  // namespace dflash
