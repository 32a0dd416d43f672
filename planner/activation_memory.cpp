#include "planner/activation_memory.hpp"

#include <algorithm>

#include "planner/checked_bytes.hpp"

namespace dflash {

std::int64_t values_per_token(std::span<const PerTokenTensor> tensors) {
  std::int64_t sum = 0;
  for (const PerTokenTensor& t : tensors) sum = checked_sum(sum, t.values_per_token);
  return sum;
}

std::int64_t values_per_token(std::span<const PerTokenTensor> tensors, std::string_view block) {
  std::int64_t sum = 0;
  for (const PerTokenTensor& t : tensors) {
    if (t.block == block) sum = checked_sum(sum, t.values_per_token);
  }
  return sum;
}

ActivationMemory activation_memory(std::span<const PerTokenTensor> layer, const LayerStack& s) {
  require_at_least(s.layers, 1, "num_hidden_layers");
  require_at_least(s.tokens, 1, "tokens");
  require_at_least(s.hidden, 1, "hidden_size");
  require_at_least(s.checkpoint_every, 1, "checkpoint_every");
  require_at_least(s.element_bytes, 1, "activation element bytes");
  ActivationMemory m;
  m.values_per_token_per_layer = values_per_token(layer);
  const std::int64_t layer_bytes = checked_product({s.tokens, m.values_per_token_per_layer, s.element_bytes});
  const std::int64_t residual_bytes = checked_product({s.tokens, s.hidden, s.element_bytes});
  m.all_layers_bytes = checked_product({s.layers, layer_bytes});
  m.residual_only_bytes = checked_product({s.layers, residual_bytes});
  m.checkpoint_every = s.checkpoint_every;
  m.boundary_bytes = checked_product({ceil_div(s.layers, s.checkpoint_every), residual_bytes});
  m.live_segment_bytes = checked_product({std::min(s.checkpoint_every, s.layers), layer_bytes});
  m.checkpointed_bytes = checked_sum(m.boundary_bytes, m.live_segment_bytes);
  return m;
}

}  // namespace dflash
