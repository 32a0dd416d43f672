// How the loss head saves for backward (SPEC §7). All four give the same loss and gradients;
// they differ in what they keep between forward and backward, and in how often they multiply.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace dflash {

enum class LossPolicy {
  materialize,            // whole [T,V] student logits and teacher log-probs, kept for backward
  chunk_retain,           // chunk by chunk, but every chunk's logits and log-probs kept (the trap)
  chunk_recompute,        // keep input rows + per-row statistics; recompute logits in backward
  chunk_grad_in_forward,  // turn each chunk into dL/dY during forward; keep only the [T,H] gradient
};

inline constexpr std::array<LossPolicy, 4> kAllLossPolicies = {
    LossPolicy::materialize, LossPolicy::chunk_retain, LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward};

std::string_view loss_policy_name(LossPolicy policy);

// Throws InputError naming `argument` and the unknown value, listing the valid names.
LossPolicy parse_loss_policy(std::string_view name, std::string_view argument = "loss_policy");

}  // namespace dflash
