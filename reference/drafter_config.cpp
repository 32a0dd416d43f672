#include "reference/drafter_config.hpp"

#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/json_fields.hpp"

namespace dflash {

using nlohmann::json;

std::string_view layer_type_name(LayerType type) {
  switch (type) {
    case LayerType::full_attention:
      return "full_attention";
    case LayerType::sliding_attention:
      return "sliding_attention";
  }
  return "unknown";
}

bool DrafterConfig::has_sliding_layer() const {
  for (LayerType t : layer_types) {
    if (t == LayerType::sliding_attention) return true;
  }
  return false;
}

LossHeadOptions DrafterConfig::loss_head_options() const {
  LossHeadOptions o;
  o.hard_weight = hard_weight;
  o.soft_weight = soft_weight;
  o.temperature = temperature;
  o.policy = loss_policy;
  o.chunk_rows = loss_chunk_rows;
  o.lm_head_grad = false;  // lm_head is frozen (SPEC §2)
  return o;
}

namespace {

// "invalid <field> in <source>: <problem>"
[[noreturn]] void config_error(std::string_view field, std::string_view source, const std::string& problem) {
  throw_input_error(str(field, " in ", source), problem);
}

void require_at_least(std::int64_t value, std::int64_t low, std::string_view field, std::string_view source) {
  if (value < low) config_error(field, source, str(value, " must be at least ", low));
}

void require_probability(double p, std::string_view field, std::string_view source) {
  if (!(std::isfinite(p) && p >= 0 && p < 1)) config_error(field, source, str(p, " must lie in [0, 1)"));
}

void require_positive(double x, std::string_view field, std::string_view source) {
  if (!(std::isfinite(x) && x > 0)) config_error(field, source, str(x, " must be finite and > 0"));
}

void require_non_negative(double x, std::string_view field, std::string_view source) {
  if (!(std::isfinite(x) && x >= 0)) config_error(field, source, str(x, " must be finite and >= 0"));
}

// The object released DFlash configs nest their own keys in; every field is read from it too.
constexpr std::string_view kDflashConfig = "dflash_config";

const json* nested_field(const json& j, std::string_view nested, std::string_view field) {
  if (nested.empty() || !j.contains(nested) || !j.at(std::string(nested)).is_object()) return nullptr;
  const json& object = j.at(std::string(nested));
  return object.contains(field) ? &object.at(std::string(field)) : nullptr;
}

// A field read from the top level, from `dflash_config`, or from one more nested object where
// released configs put it (`rope_theta` in `rope_parameters`). Two places giving different
// values is an error naming both.
const json* find_field(const json& j, std::string_view field, std::string_view source, std::string_view nested = {}) {
  struct Place {
    std::string name;
    const json* value;
  };
  const Place places[] = {{"the top level", j.contains(field) ? &j.at(std::string(field)) : nullptr},
                          {str(kDflashConfig), nested_field(j, kDflashConfig, field)},
                          {str(nested), nested_field(j, nested, field)}};
  const Place* found = nullptr;
  for (const Place& place : places) {
    if (place.value == nullptr) continue;
    if (found != nullptr && *found->value != *place.value) {
      config_error(
          field, source,
          str(found->value->dump(), " at ", found->name, " disagrees with ", place.value->dump(), " in ", place.name));
    }
    if (found == nullptr) found = &place;
  }
  return found != nullptr ? found->value : nullptr;
}

std::int64_t as_int(const json& v, std::string_view field, std::string_view source) {
  if (!v.is_number_integer()) config_error(field, source, str(v.dump(), " is not an integer"));
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
    config_error(field, source, str(v.dump(), " is too large"));
  }
  return v.get<std::int64_t>();
}

double as_number(const json& v, std::string_view field, std::string_view source) {
  if (!v.is_number()) config_error(field, source, str(v.dump(), " is not a number"));
  return v.get<double>();
}

std::string as_string(const json& v, std::string_view field, std::string_view source) {
  if (!v.is_string()) config_error(field, source, str(v.dump(), " is not a string"));
  return v.get<std::string>();
}

std::int64_t required_int(const json& j, std::string_view field, std::string_view source) {
  const json* v = find_field(j, field, source);
  if (v == nullptr || v->is_null()) config_error(field, source, "missing (required)");
  return as_int(*v, field, source);
}

template <class Read>
void optional_field(const json& j, std::string_view field, std::string_view source, Read read,
                    std::string_view nested = {}) {
  const json* v = find_field(j, field, source, nested);
  if (v != nullptr && !v->is_null()) read(*v);
}

LayerType parse_layer_type(const json& v, std::string_view field, std::string_view source) {
  const std::string name = as_string(v, field, source);
  for (LayerType t : {LayerType::full_attention, LayerType::sliding_attention}) {
    if (layer_type_name(t) == name) return t;
  }
  config_error(field, source, str("'", name, "' is not a layer type (expected full_attention or sliding_attention)"));
}

// Keys a released config may carry whose non-default value would change the model this code
// computes (TRAINING §16): each is refused, naming the key and the value, never silently ignored.
// `layer_types` must already be known (use_sliding_window is checked against it).
void refuse_unmodelled_values(const json& j, const DrafterConfig& c, std::string_view source) {
  const json* scaling = find_field(j, "rope_scaling", source);
  if (scaling != nullptr && !scaling->is_null()) {
    config_error("rope_scaling", source,
                 str(scaling->dump(), " is not supported (only plain RoPE, null, is modelled)"));
  }
  const json* rope_type = find_field(j, "rope_type", source, "rope_parameters");
  if (rope_type != nullptr && *rope_type != json("default")) {
    config_error("rope_parameters.rope_type", source,
                 str(rope_type->dump(), " is not supported (only \"default\", plain RoPE, is modelled)"));
  }
  const json* bias = find_field(j, "attention_bias", source);
  if (bias != nullptr && *bias != json(false)) {
    config_error("attention_bias", source, str(bias->dump(), " is not supported (the projections have no biases)"));
  }
  const json* act = find_field(j, "hidden_act", source);
  if (act != nullptr && *act != json("silu")) {
    config_error("hidden_act", source, str(act->dump(), " is not supported (the MLP is silu-gated)"));
  }
  // The mask of SPEC §3 fixes what each query sees; a causal flag would claim another one.
  for (const std::string_view key : {"is_causal", "causal"}) {
    if (j.contains(key)) {
      config_error(key, source, str(j.at(std::string(key)).dump(), " is present (SPEC §3's mask is not configurable)"));
    }
    if (const json* nested = nested_field(j, kDflashConfig, key)) {
      config_error(str(kDflashConfig, ".", key), source,
                   str(nested->dump(), " is present (SPEC §3's mask is not configurable)"));
    }
  }
  const json* sliding = find_field(j, "use_sliding_window", source);
  if (sliding != nullptr && *sliding == json(false) && c.has_sliding_layer()) {
    config_error("use_sliding_window", source, "false while layer_types lists sliding_attention layers");
  }
}

}  // namespace

// Every size the config implies, each product checked before it is taken (kMaxConfigSizeValues).
void require_sizes_fit(const DrafterConfig& c, std::string_view source) {
  const auto product = [&](std::int64_t a, std::int64_t b, std::string_view field, std::string_view what) {
    std::int64_t p = 0;
    if (__builtin_mul_overflow(a, b, &p) || p > kMaxConfigSizeValues) {
      config_error(field, source,
                   str(a, " x ", b, " values (", what, ") exceed the ", kMaxConfigSizeValues,
                       " a size may count (its bytes must fit 64 bits)"));
    }
    return p;
  };
  const auto sum = [&](std::initializer_list<std::int64_t> terms, std::string_view field, std::string_view what) {
    std::int64_t s = 0;
    for (std::int64_t t : terms) {
      if (__builtin_add_overflow(s, t, &s) || s > kMaxConfigSizeValues) {
        config_error(field, source,
                     str("the ", what, " exceed the ", kMaxConfigSizeValues, " values a size may count"));
      }
    }
    return s;
  };
  const std::int64_t H = c.hidden_size, K = std::int64_t(c.target_layer_ids.size());
  const std::int64_t KH = product(K, H, "hidden_size", "the feature width K H");
  const std::int64_t q = product(c.num_attention_heads, c.head_dim, "num_attention_heads", "the query width nh d");
  const std::int64_t kv = product(c.num_key_value_heads, c.head_dim, "num_key_value_heads", "the key width nkv d");
  const std::int64_t fc = product(H, KH, "hidden_size", "fc.weight, H x K H");
  const std::int64_t qH = product(q, H, "hidden_size", "q_proj and o_proj, nh d x H");
  const std::int64_t kvH = product(kv, H, "hidden_size", "k_proj and v_proj, nkv d x H");
  const std::int64_t IH = product(c.intermediate_size, H, "intermediate_size", "each MLP matrix, I x H");
  const std::int64_t layer =
      sum({qH, qH, kvH, kvH, IH, IH, IH, H, H, c.head_dim, c.head_dim}, "num_hidden_layers", "parameters of one layer");
  const std::int64_t layers = product(c.num_hidden_layers, layer, "num_hidden_layers", "the layers' parameters");
  sum({fc, H, layers, H}, "hidden_size", "trainable parameters");
  const std::int64_t VH = product(c.vocab_size, H, "vocab_size", "embed_tokens and lm_head, V x H");
  product(2, VH, "vocab_size", "embed_tokens and lm_head together");
}

void validate_drafter_config(const DrafterConfig& c, std::string_view source) {
  require_at_least(c.hidden_size, 1, "hidden_size", source);
  require_at_least(c.intermediate_size, 1, "intermediate_size", source);
  require_at_least(c.num_attention_heads, 1, "num_attention_heads", source);
  require_at_least(c.num_key_value_heads, 1, "num_key_value_heads", source);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    config_error("num_key_value_heads", source,
                 str(c.num_key_value_heads, " does not divide num_attention_heads = ", c.num_attention_heads));
  }
  require_at_least(c.head_dim, 2, "head_dim", source);
  if (c.head_dim % 2 != 0) config_error("head_dim", source, str(c.head_dim, " is odd (RoPE rotates pairs)"));
  require_at_least(c.num_hidden_layers, 1, "num_hidden_layers", source);
  if (c.num_hidden_layers > kMaxDrafterLayers) {
    config_error(
        "num_hidden_layers", source,
        str(c.num_hidden_layers, " exceeds ", kMaxDrafterLayers, " (layer 255 is the anchor sampler's RNG stream)"));
  }
  require_positive(c.rms_norm_eps, "rms_norm_eps", source);
  require_positive(c.rope_theta, "rope_theta", source);
  require_at_least(c.vocab_size, 1, "vocab_size", source);
  require_at_least(c.block_size, 2, "block_size", source);
  if (c.mask_token_id < 0 || c.mask_token_id >= c.vocab_size) {
    config_error("mask_token_id", source, str(c.mask_token_id, " is outside [0, vocab_size = ", c.vocab_size, ")"));
  }
  if (c.target_layer_ids.empty()) config_error("target_layer_ids", source, "is empty (K must be at least 1)");
  for (std::size_t i = 0; i < c.target_layer_ids.size(); ++i) {
    if (c.target_layer_ids[i] < 0) {
      config_error(str("target_layer_ids[", i, "]"), source, str(c.target_layer_ids[i], " is negative"));
    }
  }
  if (c.num_target_layers) {
    require_at_least(*c.num_target_layers, 1, "num_target_layers", source);
    for (std::size_t i = 0; i < c.target_layer_ids.size(); ++i) {
      if (c.target_layer_ids[i] >= *c.num_target_layers) {
        config_error(str("target_layer_ids[", i, "]"), source,
                     str(c.target_layer_ids[i], " is not below num_target_layers = ", *c.num_target_layers,
                         " (the target's layer count; its layers are 0 .. ", *c.num_target_layers - 1, ")"));
      }
    }
  }
  if (static_cast<std::int64_t>(c.layer_types.size()) != c.num_hidden_layers) {
    config_error("layer_types", source,
                 str("has ", c.layer_types.size(), " entries for num_hidden_layers = ", c.num_hidden_layers,
                     " (one layer type per layer)"));
  }
  if (c.has_sliding_layer()) {
    if (!c.sliding_window) config_error("sliding_window", source, "missing while a layer is sliding_attention");
    require_at_least(*c.sliding_window, 1, "sliding_window", source);
  }
  require_at_least(c.max_anchors, 1, "max_anchors", source);
  if (c.loss_decay_gamma) require_positive(*c.loss_decay_gamma, "loss_decay_gamma", source);
  require_non_negative(c.hard_weight, "hard_weight", source);
  require_non_negative(c.soft_weight, "soft_weight", source);
  require_positive(c.temperature, "temperature", source);
  require_probability(c.attention_dropout, "attention_dropout", source);
  require_probability(c.hidden_dropout, "hidden_dropout", source);
  require_at_least(c.loss_chunk_rows, 1, "loss_chunk_rows", source);
  require_at_least(c.checkpoint_every, 1, "checkpoint_every", source);
  require_sizes_fit(c, source);
}

DrafterConfig drafter_config_from_json(const json& j, std::string_view source) {
  if (!j.is_object()) throw_input_error(source, "the config is not a JSON object");
  DrafterConfig c;
  c.hidden_size = required_int(j, "hidden_size", source);
  c.intermediate_size = required_int(j, "intermediate_size", source);
  c.num_attention_heads = required_int(j, "num_attention_heads", source);
  c.num_key_value_heads = c.num_attention_heads;
  optional_field(j, "num_key_value_heads", source,
                 [&](const json& v) { c.num_key_value_heads = as_int(v, "num_key_value_heads", source); });
  c.num_hidden_layers = required_int(j, "num_hidden_layers", source);
  const json* head_dim = find_field(j, "head_dim", source);
  if (head_dim != nullptr && !head_dim->is_null()) {
    c.head_dim = as_int(*head_dim, "head_dim", source);
  } else {
    if (c.num_attention_heads < 1 || c.hidden_size % c.num_attention_heads != 0) {
      config_error("head_dim", source,
                   str("missing, and hidden_size = ", c.hidden_size,
                       " is not a multiple of num_attention_heads = ", c.num_attention_heads));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  optional_field(j, "rms_norm_eps", source,
                 [&](const json& v) { c.rms_norm_eps = as_number(v, "rms_norm_eps", source); });
  optional_field(
      j, "rope_theta", source, [&](const json& v) { c.rope_theta = as_number(v, "rope_theta", source); },
      "rope_parameters");
  c.vocab_size = required_int(j, "vocab_size", source);
  c.block_size = required_int(j, "block_size", source);
  c.mask_token_id = required_int(j, "mask_token_id", source);

  const json* ids = find_field(j, "target_layer_ids", source);
  if (ids == nullptr || ids->is_null()) config_error("target_layer_ids", source, "missing (required)");
  if (!ids->is_array()) config_error("target_layer_ids", source, str(ids->dump(), " is not a list"));
  for (std::size_t i = 0; i < ids->size(); ++i) {
    c.target_layer_ids.push_back(as_int((*ids)[i], str("target_layer_ids[", i, "]"), source));
  }

  optional_field(j, "num_target_layers", source,
                 [&](const json& v) { c.num_target_layers = as_int(v, "num_target_layers", source); });

  const json* types = find_field(j, "layer_types", source);
  if (types != nullptr && !types->is_null()) {
    if (!types->is_array()) config_error("layer_types", source, str(types->dump(), " is not a list"));
    for (std::size_t i = 0; i < types->size(); ++i) {
      c.layer_types.push_back(parse_layer_type((*types)[i], str("layer_types[", i, "]"), source));
    }
  } else {
    // Hugging Face derives the types from use_sliding_window when the list is absent; without
    // the list only the all-full case is unambiguous.
    const json* sliding = find_field(j, "use_sliding_window", source);
    if (sliding != nullptr && sliding->is_boolean() && sliding->get<bool>()) {
      config_error("layer_types", source, "missing while use_sliding_window is true: list one type per layer");
    }
    if (c.num_hidden_layers > 0 && c.num_hidden_layers <= kMaxDrafterLayers) {
      c.layer_types.assign(static_cast<std::size_t>(c.num_hidden_layers), LayerType::full_attention);
    }
  }
  optional_field(j, "sliding_window", source,
                 [&](const json& v) { c.sliding_window = as_int(v, "sliding_window", source); });
  refuse_unmodelled_values(j, c, source);

  optional_field(j, "max_anchors", source, [&](const json& v) { c.max_anchors = as_int(v, "max_anchors", source); });
  optional_field(j, "loss_decay_gamma", source,
                 [&](const json& v) { c.loss_decay_gamma = as_number(v, "loss_decay_gamma", source); });
  optional_field(j, "hard_weight", source, [&](const json& v) { c.hard_weight = as_number(v, "hard_weight", source); });
  optional_field(j, "soft_weight", source, [&](const json& v) { c.soft_weight = as_number(v, "soft_weight", source); });
  optional_field(j, "temperature", source, [&](const json& v) { c.temperature = as_number(v, "temperature", source); });
  optional_field(j, "attention_dropout", source,
                 [&](const json& v) { c.attention_dropout = as_number(v, "attention_dropout", source); });
  optional_field(j, "hidden_dropout", source,
                 [&](const json& v) { c.hidden_dropout = as_number(v, "hidden_dropout", source); });
  optional_field(j, "seed", source, [&](const json& v) {
    if (!v.is_number_unsigned()) config_error("seed", source, str(v.dump(), " is not a non-negative integer"));
    c.seed = v.get<std::uint64_t>();
  });
  optional_field(j, "loss_chunk_rows", source,
                 [&](const json& v) { c.loss_chunk_rows = as_int(v, "loss_chunk_rows", source); });
  optional_field(j, "loss_policy", source, [&](const json& v) {
    c.loss_policy = parse_loss_policy(as_string(v, "loss_policy", source), str("loss_policy in ", source));
  });
  optional_field(j, "trunk_policy", source, [&](const json& v) {
    c.trunk_policy = parse_trunk_policy(as_string(v, "trunk_policy", source), str("trunk_policy in ", source));
  });
  optional_field(j, "checkpoint_every", source,
                 [&](const json& v) { c.checkpoint_every = as_int(v, "checkpoint_every", source); });

  validate_drafter_config(c, source);
  return c;
}

DrafterConfig load_drafter_config(const std::filesystem::path& path) {
  return drafter_config_from_json(read_json_file(path), path.string());
}

json drafter_config_to_json(const DrafterConfig& c) {
  json j;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["vocab_size"] = c.vocab_size;
  j["block_size"] = c.block_size;
  j["mask_token_id"] = c.mask_token_id;
  j["target_layer_ids"] = c.target_layer_ids;
  if (c.num_target_layers) j["num_target_layers"] = *c.num_target_layers;  // absent: unknown
  json types = json::array();
  for (LayerType t : c.layer_types) types.push_back(std::string(layer_type_name(t)));
  j["layer_types"] = types;
  j["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
  j["max_anchors"] = c.max_anchors;
  j["loss_decay_gamma"] = c.loss_decay_gamma ? json(*c.loss_decay_gamma) : json(nullptr);
  j["hard_weight"] = c.hard_weight;
  j["soft_weight"] = c.soft_weight;
  j["temperature"] = c.temperature;
  j["attention_dropout"] = c.attention_dropout;
  j["hidden_dropout"] = c.hidden_dropout;
  j["seed"] = c.seed;
  j["loss_chunk_rows"] = c.loss_chunk_rows;
  j["loss_policy"] = std::string(loss_policy_name(c.loss_policy));
  j["trunk_policy"] = std::string(trunk_policy_name(c.trunk_policy));
  j["checkpoint_every"] = c.checkpoint_every;
  return j;
}

}  // namespace dflash
