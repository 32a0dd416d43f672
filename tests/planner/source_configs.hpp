// The planner tests' configs: the source tree (DFLASH_SOURCE_DIR, else the one the tests were built
// from) and the released full-scale drafter's plan request.
#pragma once

#include <cstdlib>
#include <filesystem>

#include "planner/training_plan.hpp"

namespace dflash {

inline std::filesystem::path source_dir() {
  const char* dir = std::getenv("DFLASH_SOURCE_DIR");
  return dir ? dir : DFLASH_SOURCE_DIR_DEFAULT;
}

// configs/qwen3.6-27b.json at the plan's defaults (PlanRequest::from_config).
inline PlanRequest full_scale_request() {
  return PlanRequest::from_config(load_drafter_config(source_dir() / "configs/qwen3.6-27b.json"));
}

}  // namespace dflash
