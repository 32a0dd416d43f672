// How the drafter trunk saves for backward (SPEC §7). All three give the same loss and gradients,
// bitwise (a recomputed layer runs the same code on the same inputs, and dropout masks are
// regenerated from their coordinates); they differ only in what is kept and in time.
// The exact tensors each policy keeps are listed in reference/trunk_memory.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace dflash {

enum class TrunkPolicy {
  none,       // keep every layer's intermediates from forward to backward
  per_layer,  // keep each layer's input; recompute the layer in backward
  every_k,    // keep the input of every k-th layer (a segment of k layers); recompute a segment in backward
};

inline constexpr std::array<TrunkPolicy, 3> kAllTrunkPolicies = {TrunkPolicy::none, TrunkPolicy::per_layer,
                                                                 TrunkPolicy::every_k};

std::string_view trunk_policy_name(TrunkPolicy policy);

// Throws InputError naming `argument` and the unknown value, listing the valid names.
TrunkPolicy parse_trunk_policy(std::string_view name, std::string_view argument = "trunk_policy");

// Layers per recomputed segment: per_layer 1, every_k k, none all of them (nothing is recomputed,
// the whole trunk is one segment whose intermediates were kept by the forward).
std::int64_t trunk_segment_length(TrunkPolicy policy, std::int64_t checkpoint_every, std::int64_t layers);

}  // namespace dflash
