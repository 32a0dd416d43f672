#include "planner/decoder_config.hpp"

#include "io/errors.hpp"
#include "io/json_fields.hpp"
#include "planner/checked_bytes.hpp"

namespace dflash {

void validate_decoder_config(const DecoderConfig& c, std::string_view source) {
  auto positive = [&](std::int64_t v, std::string_view field) {
    require_at_least(v, 1, config_field_name(source, field));
  };
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.num_key_value_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.num_hidden_layers, "num_hidden_layers");
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw_input_error(config_field_name(source, "num_key_value_heads"),
                      str(c.num_key_value_heads, " does not divide num_attention_heads = ", c.num_attention_heads));
  }
}

DecoderConfig decoder_config_from_json(const nlohmann::json& json, std::string_view source) {
  const bool nested = json.is_object() && !json.contains("hidden_size") && json.contains("text_config");
  const JsonFields fields(nested ? json.at("text_config") : json, source);
  DecoderConfig c;
  c.hidden_size = fields.integer("hidden_size");
  c.intermediate_size = fields.integer("intermediate_size");
  c.num_attention_heads = fields.integer("num_attention_heads");
  c.num_key_value_heads = fields.integer_or("num_key_value_heads", c.num_attention_heads);
  require_at_least(c.num_attention_heads, 1, fields.name("num_attention_heads"));  // before dividing by it
  c.head_dim = fields.integer_or("head_dim", c.hidden_size / c.num_attention_heads);
  c.num_hidden_layers = fields.integer("num_hidden_layers");
  c.attn_output_gate = fields.boolean_or("attn_output_gate", false);
  validate_decoder_config(c, source);
  return c;
}

DecoderConfig load_decoder_config(const std::filesystem::path& path) {
  return decoder_config_from_json(read_json_file(path), path.string());
}

}  // namespace dflash
