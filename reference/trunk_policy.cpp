#include "reference/trunk_policy.hpp"

#include <algorithm>
#include <string>

#include "io/errors.hpp"

namespace dflash {

std::string_view trunk_policy_name(TrunkPolicy policy) {
  switch (policy) {
    case TrunkPolicy::none:
      return "none";
    case TrunkPolicy::per_layer:
      return "per_layer";
    case TrunkPolicy::every_k:
      return "every_k";
  }
  return "unknown";
}

TrunkPolicy parse_trunk_policy(std::string_view name, std::string_view argument) {
  std::string valid;
  for (TrunkPolicy p : kAllTrunkPolicies) {
    if (trunk_policy_name(p) == name) return p;
    valid += (valid.empty() ? "" : ", ") + std::string(trunk_policy_name(p));
  }
  throw_input_error(argument, str("'", name, "' is not a trunk policy (expected one of: ", valid, ")"));
}

std::int64_t trunk_segment_length(TrunkPolicy policy, std::int64_t checkpoint_every, std::int64_t layers) {
  if (checkpoint_every < 1) throw_input_error("checkpoint_every", str(checkpoint_every, " must be at least 1"));
  switch (policy) {
    case TrunkPolicy::none:
      return std::max<std::int64_t>(layers, 1);
    case TrunkPolicy::per_layer:
      return 1;
    case TrunkPolicy::every_k:
      return checkpoint_every;
  }
  return 1;
}

}  // namespace dflash
