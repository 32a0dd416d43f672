// Which policy combinations fit: the plan of every loss policy x trunk policy x ZeRO stage for one
// request (everything else as requested), with its total and verdict.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/training_plan.hpp"

namespace dflash {

struct PolicyVerdict {
  LossPolicy loss_policy;
  TrunkPolicy trunk_policy;
  int zero_stage = 0;
  std::int64_t total_bytes = 0;
  std::int64_t usable_bytes = 0;
  bool fits = false;
};

// Whether the step the precision plans offers the loss policy: the CUDA step (TrunkMemoryModel::cuda,
// production) has no chunk_retain (cuda/loss_head/head.hpp); the reference offers every policy.
bool loss_policy_offered(const TrainingPrecision& precision, LossPolicy policy);

// Loss policies outermost (those the precision's step offers), then trunk policies, then ZeRO 0 and 1
// (in enum order).
std::vector<PolicyVerdict> policy_verdicts(const PlanRequest& request);

}  // namespace dflash
