#include "distributed/training_config.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/json_fields.hpp"

namespace dflash {

namespace {

// SPEC §6: the global sequence index is a 20-bit field of the RNG stream.
constexpr std::int64_t kMaxGlobalBatchSequences = std::int64_t(1) << 20;

[[noreturn]] void field_error(std::string_view field, std::string_view source, const std::string& problem) {
  throw_input_error(config_field_name(source, field), problem);
}

void require_range(double x, double low, double high, bool high_open, std::string_view field, std::string_view source) {
  const bool ok = std::isfinite(x) && x >= low && (high_open ? x < high : x <= high);
  if (!ok) field_error(field, source, str(x, " must lie in [", low, ", ", high, high_open ? ")" : "]"));
}

void require_int_at_least(std::int64_t x, std::int64_t low, std::string_view field, std::string_view source) {
  if (x < low) field_error(field, source, str(x, " must be at least ", low));
}

}  // namespace

void validate_training_config(const TrainingConfig& c, std::string_view source) {
  const double inf = INFINITY;
  require_range(c.learning_rate, 0, inf, true, "learning_rate", source);
  require_range(c.min_learning_rate, 0, c.learning_rate, false, "min_learning_rate", source);
  require_int_at_least(c.warmup_steps, 0, "warmup_steps", source);
  require_int_at_least(c.total_steps, 1, "total_steps", source);
  require_range(c.adam_beta1, 0, 1, true, "adam_beta1", source);
  require_range(c.adam_beta2, 0, 1, true, "adam_beta2", source);
  if (!(std::isfinite(c.adam_epsilon) && c.adam_epsilon > 0)) {
    field_error("adam_epsilon", source, str(c.adam_epsilon, " must be finite and > 0"));
  }
  require_range(c.weight_decay, 0, inf, true, "weight_decay", source);
  require_range(c.max_grad_norm, 0, inf, true, "max_grad_norm", source);
  require_int_at_least(c.global_batch_sequences, 1, "global_batch_sequences", source);
  if (c.global_batch_sequences > kMaxGlobalBatchSequences) {
    field_error("global_batch_sequences", source,
                str(c.global_batch_sequences, " exceeds 2^20 (SPEC §6: the global sequence index is 20 bits)"));
  }
  require_int_at_least(c.micro_steps, 1, "micro_steps", source);
  if (c.zero_stage != 0 && c.zero_stage != 1) field_error("zero_stage", source, str(c.zero_stage, " is not 0 or 1"));
  require_int_at_least(c.max_context, 1, "max_context", source);
}

TrainingConfig training_config_from_json(const nlohmann::json& json, std::string_view source) {
  const JsonFields f(json, source);
  TrainingConfig c;
  c.learning_rate = f.number_or("learning_rate", c.learning_rate);
  c.min_learning_rate = f.number_or("min_learning_rate", c.min_learning_rate);
  c.warmup_steps = f.integer_or("warmup_steps", c.warmup_steps);
  c.total_steps = f.integer("total_steps");
  c.adam_beta1 = f.number_or("adam_beta1", c.adam_beta1);
  c.adam_beta2 = f.number_or("adam_beta2", c.adam_beta2);
  c.adam_epsilon = f.number_or("adam_epsilon", c.adam_epsilon);
  c.weight_decay = f.number_or("weight_decay", c.weight_decay);
  c.max_grad_norm = f.number_or("max_grad_norm", c.max_grad_norm);
  c.global_batch_sequences = f.integer("global_batch_sequences");
  c.micro_steps = f.integer_or("micro_steps", c.micro_steps);
  const std::int64_t zero = f.integer_or("zero_stage", c.zero_stage);
  if (zero != 0 && zero != 1) field_error("zero_stage", source, str(zero, " is not 0 or 1"));
  c.zero_stage = static_cast<int>(zero);
  c.max_context = f.integer("max_context");
  validate_training_config(c, source);
  return c;
}

TrainingConfig load_training_config(const std::filesystem::path& path) {
  return training_config_from_json(read_json_file(path), path.string());
}

nlohmann::json training_config_to_json(const TrainingConfig& c) {
  return {{"learning_rate", c.learning_rate}, {"min_learning_rate", c.min_learning_rate},
          {"warmup_steps", c.warmup_steps},   {"total_steps", c.total_steps},
          {"adam_beta1", c.adam_beta1},       {"adam_beta2", c.adam_beta2},
          {"adam_epsilon", c.adam_epsilon},   {"weight_decay", c.weight_decay},
          {"max_grad_norm", c.max_grad_norm}, {"global_batch_sequences", c.global_batch_sequences},
          {"micro_steps", c.micro_steps},     {"zero_stage", c.zero_stage},
          {"max_context", c.max_context}};
}

}  // namespace dflash
