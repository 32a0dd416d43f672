// A Hugging Face style decoder config.json, reduced to what sets the size of a layer's saved
// activations. Used for the generic activation model (`dflash plan --decoder`), e.g. the target
// model a drafter learns from, whose layers are the textbook case of SPEC §8.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dflash {

struct DecoderConfig {
  std::int64_t hidden_size = 0;          // H
  std::int64_t intermediate_size = 0;    // I
  std::int64_t num_attention_heads = 0;  // nh
  std::int64_t num_key_value_heads = 0;  // nkv
  std::int64_t head_dim = 0;             // d
  std::int64_t num_hidden_layers = 0;    // L
  bool attn_output_gate = false;         // q_proj also produces a per-channel output gate: width 2 nh d
};

// Throws InputError naming the field (prefixed by `source`, the file, when given) and its value.
void validate_decoder_config(const DecoderConfig& config, std::string_view source = {});

// Reads the fields above (head_dim defaults to hidden_size / num_attention_heads and
// num_key_value_heads to num_attention_heads, as in Hugging Face; attn_output_gate to false).
// A multimodal config that nests the language model under "text_config" is read from there.
DecoderConfig decoder_config_from_json(const nlohmann::json& json, std::string_view source);
DecoderConfig load_decoder_config(const std::filesystem::path& path);

}  // namespace dflash
