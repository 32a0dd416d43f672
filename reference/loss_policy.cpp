#include "reference/loss_policy.hpp"

#include "io/errors.hpp"

namespace dflash {

std::string_view loss_policy_name(LossPolicy policy) {
  switch (policy) {
    case LossPolicy::materialize:
      return "materialize";
    case LossPolicy::chunk_retain:
      return "chunk_retain";
    case LossPolicy::chunk_recompute:
      return "chunk_recompute";
    case LossPolicy::chunk_grad_in_forward:
      return "chunk_grad_in_forward";
  }
  return "unknown";
}

LossPolicy parse_loss_policy(std::string_view name, std::string_view argument) {
  std::string valid;
  for (LossPolicy p : kAllLossPolicies) {
    if (loss_policy_name(p) == name) return p;
    valid += (valid.empty() ? "" : ", ") + std::string(loss_policy_name(p));
  }
  throw_input_error(argument, str("'", name, "' is not a loss policy (expected one of: ", valid, ")"));
}

}  // namespace dflash
