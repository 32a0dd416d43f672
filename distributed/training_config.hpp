// The training fields of TRAINING §12, read from the same config JSON as the drafter's model
// fields (reference/drafter_config.hpp reads those; this file reads only the fields below and
// ignores every other key). Every value is validated on load; an error names the field, the
// value and the source, as the drafter config's do.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace dflash {

struct TrainingConfig {
  double learning_rate = 6e-4;     // peak lr
  double min_learning_rate = 0.0;  // floor of the cosine, and lr from total_steps on
  std::int64_t warmup_steps = 0;   // linear warm-up steps
  std::int64_t total_steps = 0;    // required: length of the cosine schedule
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_epsilon = 1e-8;
  double weight_decay = 0.0;                // decoupled; matrices only, never norm weights
  double max_grad_norm = 1.0;               // global-norm clipping; 0 disables
  std::int64_t global_batch_sequences = 0;  // required: sequences per optimizer step, all ranks together
  std::int64_t micro_steps = 1;             // U: gradient accumulation steps per optimizer step
  int zero_stage = 1;                       // 0: every rank keeps the whole optimizer state; 1: sharded (§13)
  std::int64_t max_context = 0;             // required: the longest context S a step uses (§12)
};

// Ranges: learning_rate >= 0 and finite, 0 <= min_learning_rate <= learning_rate, warmup_steps >= 0,
// total_steps >= 1, betas in [0, 1), adam_epsilon > 0, weight_decay >= 0, max_grad_norm >= 0,
// 1 <= global_batch_sequences <= 2^20 (SPEC §6: seq < 2^20), micro_steps >= 1, zero_stage 0 or 1,
// max_context >= 1. `source` (a file name, or "config") is named in every message.
void validate_training_config(const TrainingConfig& config, std::string_view source = "config");

// Reads the fields above from a config object (absent: the default; total_steps,
// global_batch_sequences and max_context are required), then validates.
TrainingConfig training_config_from_json(const nlohmann::json& json, std::string_view source = "config");
TrainingConfig load_training_config(const std::filesystem::path& path);

// Every field under its TRAINING §12 name; merges into a drafter config's JSON (disjoint keys).
nlohmann::json training_config_to_json(const TrainingConfig& config);

}  // namespace dflash
