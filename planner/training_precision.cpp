#include "planner/training_precision.hpp"

#include "planner/checked_bytes.hpp"

namespace dflash {

void validate_training_precision(const TrainingPrecision& p) {
  require_at_least(p.parameter_bytes, 1, "parameter element bytes");
  require_at_least(p.master_bytes, 0, "master weight element bytes");
  require_at_least(p.optimizer_state_bytes, 0, "optimizer state bytes per parameter");
  require_at_least(p.gradient_bytes, 1, "gradient element bytes");
  require_at_least(p.frozen_bytes, 1, "frozen weight element bytes");
  require_at_least(p.activation_bytes, 1, "activation element bytes");
  require_at_least(p.statistic_bytes, 1, "statistic element bytes");
  require_at_least(p.input_bytes, 1, "input element bytes");
}

}  // namespace dflash
