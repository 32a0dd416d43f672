#include "planner/policy_verdicts.hpp"

namespace dflash {

bool loss_policy_offered(const TrainingPrecision& precision, LossPolicy policy) {
  return precision.trunk != TrunkMemoryModel::cuda || policy != LossPolicy::chunk_retain;
}

std::vector<PolicyVerdict> policy_verdicts(const PlanRequest& request) {
  std::vector<PolicyVerdict> out;
  for (LossPolicy loss : kAllLossPolicies) {
    if (!loss_policy_offered(request.precision, loss)) continue;
    for (TrunkPolicy trunk : kAllTrunkPolicies) {
      for (int zero : {0, 1}) {
        PlanRequest r = request;
        r.loss_policy = loss;
        r.trunk_policy = trunk;
        r.layout.zero_stage = zero;
        const MemoryPlan plan = plan_training_memory(r);
        out.push_back({loss, trunk, zero, plan.fit.total_bytes, plan.fit.usable_bytes, plan.fit.fits});
      }
    }
  }
  return out;
}

}  // namespace dflash
