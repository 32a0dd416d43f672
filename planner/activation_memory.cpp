#include "planner/activation_memory.hpp"

#include <algorithm>

#include "planner/checked_bytes.hpp"
#include "reference/errors.hpp"

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
  if (s.layers < 1) throw_input_error("num_hidden_layers", str(s.layers, " must be at least 1"));
  if (s.tokens < 1) throw_input_error("tokens", str(s.tokens, " must be at least 1"));
  if (s.hidden < 1) throw_input_error("hidden_size", str(s.hidden, " must be at least 1"));
  if (s.checkpoint_every < 1) throw_input_error("checkpoint_every", str(s.checkpoint_every, " must be at least 1"));
  if (s.element_bytes < 1) throw_input_error("activation element bytes", str(s.element_bytes, " must be at least 1"));
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
