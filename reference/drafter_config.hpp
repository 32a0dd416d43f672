// The drafter's configuration (SPEC §1): the model fields under their Hugging Face `config.json`
// names, so a released DFlash drafter config loads unchanged, plus the project's training fields.
// Every value is validated on load; an error names the field, the offending value and the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "reference/loss_head_types.hpp"
#include "reference/loss_policy.hpp"
#include "reference/trunk_policy.hpp"

namespace dflash {

enum class LayerType { full_attention, sliding_attention };

std::string_view layer_type_name(LayerType type);

// The largest layer index the RNG coordinates allow: layer 255 is the anchor sampler's (SPEC §6).
inline constexpr std::int64_t kMaxDrafterLayers = 255;

// The most values any size a config implies may count (a tensor, the K H feature width, the
// parameter total, the frozen V H matrices): its bytes as doubles then fit a signed 64-bit count. A
// product past it is refused by validate_drafter_config, naming the field: wrapped, it would size a
// buffer too small and the code would write past it (data synth at vocab_size 2^62).
inline constexpr std::int64_t kMaxConfigSizeValues = std::numeric_limits<std::int64_t>::max() / 8;

struct DrafterConfig {
  // Model fields (Hugging Face names).
  std::int64_t hidden_size = 0;          // H
  std::int64_t intermediate_size = 0;    // I
  std::int64_t num_attention_heads = 0;  // nh
  std::int64_t num_key_value_heads = 0;  // nkv (absent: nh)
  std::int64_t head_dim = 0;             // d (absent: H / nh)
  std::int64_t num_hidden_layers = 0;    // L
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::int64_t vocab_size = 0;  // V
  std::int64_t block_size = 0;  // B
  std::int64_t mask_token_id = 0;
  std::vector<std::int64_t> target_layer_ids;  // K = its length
  std::vector<LayerType> layer_types;          // one per layer (absent: all full_attention)
  std::optional<std::int64_t> sliding_window;  // required (>= 1) when a sliding layer exists

  // Training fields (project-defined; defaults apply when a released config lacks them).
  std::int64_t max_anchors = 1024;
  std::optional<double> loss_decay_gamma;  // null: no decay
  double hard_weight = 0.85;
  double soft_weight = 0.15;
  double temperature = 1.0;
  double attention_dropout = 0.0;
  double hidden_dropout = 0.0;
  std::uint64_t seed = 0;
  std::int64_t loss_chunk_rows = 2048;
  LossPolicy loss_policy = LossPolicy::chunk_recompute;
  TrunkPolicy trunk_policy = TrunkPolicy::per_layer;
  std::int64_t checkpoint_every = 1;

  // The target model's depth (its config's num_hidden_layers), under the name DFlash drafter
  // configs and their loaders give it (SGLang refuses a target_layer_id at or above it). Not K:
  // K is num_feature_layers(). Absent until a run learns it from --target, --init or the config.
  std::optional<std::int64_t> num_target_layers = std::nullopt;

  std::int64_t num_feature_layers() const { return static_cast<std::int64_t>(target_layer_ids.size()); }  // K
  std::int64_t feature_width() const { return num_feature_layers() * hidden_size; }                       // K H
  std::int64_t query_width() const { return num_attention_heads * head_dim; }                             // nh d
  std::int64_t kv_width() const { return num_key_value_heads * head_dim; }                                // nkv d
  std::int64_t heads_per_kv_head() const { return num_attention_heads / num_key_value_heads; }
  bool has_sliding_layer() const;
  // The loss head's options from the training fields (policy, chunk rows, h, s, tau).
  LossHeadOptions loss_head_options() const;
};

// Checks every field; `source` (a file name, or "config") is named in every message.
void validate_drafter_config(const DrafterConfig& config, std::string_view source = "config");

// Parses a Hugging Face style config, then validates it. Every field is also read from a nested
// `dflash_config` object, and `rope_theta` from `rope_parameters`, as released DFlash configs
// write them; one field given in two places with different values is refused, naming both.
// Unknown keys are ignored, except those whose non-default value this implementation would
// mis-model (TRAINING §16), which are refused: `rope_scaling` not null, `rope_parameters.rope_type`
// not "default", `attention_bias` not false, `hidden_act` not "silu", `is_causal` or `causal`
// present (top level or in `dflash_config`), `use_sliding_window` false with sliding layers.
DrafterConfig drafter_config_from_json(const nlohmann::json& json, std::string_view source = "config");
DrafterConfig load_drafter_config(const std::filesystem::path& path);

// Every field under its SPEC name (training fields included), loadable by drafter_config_from_json.
nlohmann::json drafter_config_to_json(const DrafterConfig& config);

}  // namespace dflash
