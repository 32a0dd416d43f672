// A plan held against what the code allocated: per tracker category, the planned bytes and the
// tracker's peak. The plan is an upper bound that must be tight: never below the measurement, and
// above it by no more than the slack the caller states.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/plan_category.hpp"
#include "reference/memory_tracker.hpp"

namespace dflash {

struct CategoryComparison {
  MemoryCategory category;
  std::int64_t planned = 0;
  std::int64_t measured = 0;  // the tracker's peak
  std::int64_t excess() const { return planned - measured; }
};

// Every tracker category, in enum order.
std::vector<CategoryComparison> compare_plan_with_tracker(const CategoryBytes& plan, const MemoryTracker& tracker);

// "loss_saved: planned 1234 B, measured 1200 B (excess 34 B)" per line, for failure messages.
std::string comparison_report(const std::vector<CategoryComparison>& comparisons);

}  // namespace dflash
