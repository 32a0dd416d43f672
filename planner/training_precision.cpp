#include "planner/training_precision.hpp"

#include "reference/errors.hpp"

namespace dflash {

void validate_training_precision(const TrainingPrecision& p) {
  auto at_least = [](std::int64_t v, std::int64_t low, std::string_view field) {
    if (v < low) throw_input_error(field, str(v, " must be at least ", low));
  };
  at_least(p.parameter_bytes, 1, "parameter element bytes");
  at_least(p.master_bytes, 0, "master weight element bytes");
  at_least(p.optimizer_state_bytes, 0, "optimizer state bytes per parameter");
  at_least(p.gradient_bytes, 1, "gradient element bytes");
  at_least(p.frozen_bytes, 1, "frozen weight element bytes");
  at_least(p.activation_bytes, 1, "activation element bytes");
  at_least(p.statistic_bytes, 1, "statistic element bytes");
  at_least(p.input_bytes, 1, "input element bytes");
}

}  // namespace dflash
