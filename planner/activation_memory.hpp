// Saved activations of a stack of identical layers, from the list of tensors one layer keeps per
// token (SPEC §8): everything kept, the residual stream alone (the naive count), and checkpointing
// every k layers (the k-th layer inputs kept as boundaries, one segment rebuilt and live at a time
// during backward: peak = boundaries + one live segment).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace dflash {

// One tensor a layer keeps from forward until backward, `values_per_token` values per token row
// (the generic model of SPEC §8; the drafter lists its own, with shapes: reference/trunk_memory.hpp).
struct PerTokenTensor {
  std::string_view block;  // "attention", "mlp", ...
  std::string_view name;   // what it is and why backward needs it
  std::int64_t values_per_token = 0;
};

std::int64_t values_per_token(std::span<const PerTokenTensor> tensors);
std::int64_t values_per_token(std::span<const PerTokenTensor> tensors, std::string_view block);

struct LayerStack {
  std::int64_t layers = 0;            // L
  std::int64_t tokens = 0;            // T
  std::int64_t hidden = 0;            // H (a boundary is one [T,H] residual row per token)
  std::int64_t checkpoint_every = 1;  // k
  std::int64_t element_bytes = 2;     // b
};

struct ActivationMemory {
  std::int64_t values_per_token_per_layer = 0;
  std::int64_t all_layers_bytes = 0;     // L T v b: nothing recomputed
  std::int64_t residual_only_bytes = 0;  // L T H b
  std::int64_t checkpoint_every = 0;     // k
  std::int64_t boundary_bytes = 0;       // ceil(L/k) T H b
  std::int64_t live_segment_bytes = 0;   // min(k,L) T v b
  std::int64_t checkpointed_bytes = 0;   // boundaries + one live segment
};

// Throws InputError naming the field ("checkpoint_every", "tokens", "num_hidden_layers", ...).
ActivationMemory activation_memory(std::span<const PerTokenTensor> layer, const LayerStack& stack);

}  // namespace dflash
