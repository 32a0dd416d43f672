// What one generic decoder layer (pre-norm attention + SwiGLU MLP, Hugging Face style) keeps per
// token for backward, tensor by tensor (SPEC §8, BACKGROUND "The trunk"):
//
//   attention  input_layernorm input x             H    its backward needs the input (and 1/rms)
//              input_layernorm output u            H    dW_q, dW_k, dW_v need it
//              q_proj output                       nh d (2 nh d with attn_output_gate: q and the gate)
//              k_proj output                       nkv d
//              v_proj output                       nkv d
//              attention output (o_proj input)     nh d dW_o needs it
//              o_proj output (attention branch)    H    the hidden-dropout site's input
//   mlp        post_attention_layernorm input      H    its backward needs the input
//              post_attention_layernorm output     H    dW_gate, dW_up need it
//              gate_proj output                    I    silu' needs it
//              up_proj output                      I    d(silu(g)) = dy ⊙ up
//              silu(gate) ⊙ up (down_proj input)   I    dW_down needs it
//
// This is SPEC §8's count: for H 5120, q 12288 (gated), k and v 1024, attention output 6144,
// FFN 17408 it gives attention 3·5120 + 12288 + 2·1024 + 6144 = 35,840 and MLP
// 2·5120 + 3·17408 = 62,464, 98,304 in all: 19.2 × the residual width. Of these only the o_proj
// output could be dropped by a backward that regenerates the dropout mask (SPEC §6); an autograd
// framework keeps it (or its mask), and SPEC §8 counts it, so the generic model does too. The
// drafter's own trunk is counted from what the reference drafter keeps (trunk_memory.hpp).
#pragma once

#include <vector>

#include "planner/activation_memory.hpp"
#include "planner/decoder_config.hpp"

namespace dflash {

inline constexpr std::string_view kAttentionBlock = "attention";
inline constexpr std::string_view kMlpBlock = "mlp";

std::vector<PerTokenTensor> decoder_layer_saved_tensors(const DecoderConfig& config);

// The whole stack of config.num_hidden_layers layers over `tokens` tokens.
ActivationMemory decoder_activation_memory(const DecoderConfig& config, std::int64_t tokens,
                                           std::int64_t checkpoint_every, std::int64_t element_bytes);

}  // namespace dflash
