#include "planner/decoder_layer_activations.hpp"

#include "planner/checked_bytes.hpp"

namespace dflash {

std::vector<PerTokenTensor> decoder_layer_saved_tensors(const DecoderConfig& c) {
  validate_decoder_config(c);
  const std::int64_t H = c.hidden_size, I = c.intermediate_size;
  const std::int64_t q = checked_product({c.num_attention_heads, c.head_dim});
  const std::int64_t kv = checked_product({c.num_key_value_heads, c.head_dim});
  return {
      {kAttentionBlock, "input_layernorm input", H},
      {kAttentionBlock, "input_layernorm output", H},
      {kAttentionBlock, c.attn_output_gate ? "q_proj output (queries and output gate)" : "q_proj output",
       checked_product({c.attn_output_gate ? 2 : 1, q})},
      {kAttentionBlock, "k_proj output", kv},
      {kAttentionBlock, "v_proj output", kv},
      {kAttentionBlock, "attention output (o_proj input)", q},
      {kAttentionBlock, "o_proj output", H},
      {kMlpBlock, "post_attention_layernorm input", H},
      {kMlpBlock, "post_attention_layernorm output", H},
      {kMlpBlock, "gate_proj output", I},
      {kMlpBlock, "up_proj output", I},
      {kMlpBlock, "silu(gate) * up (down_proj input)", I},
  };
}

ActivationMemory decoder_activation_memory(const DecoderConfig& c, std::int64_t tokens, std::int64_t checkpoint_every,
                                           std::int64_t element_bytes) {
  const std::vector<PerTokenTensor> layer = decoder_layer_saved_tensors(c);
  return activation_memory(layer, {.layers = c.num_hidden_layers,
                                   .tokens = tokens,
                                   .hidden = c.hidden_size,
                                   .checkpoint_every = checkpoint_every,
                                   .element_bytes = element_bytes});
}

}  // namespace dflash
