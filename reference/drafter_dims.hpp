// The sizes of one sequence's drafter step (SPEC notation): the config's model dimensions plus
// the sequence's context length S and anchor slots N.
#pragma once

#include <cstdint>

#include "reference/drafter_config.hpp"

namespace dflash {

struct DrafterDims {
  std::int64_t S = 0;    // context length
  std::int64_t N = 0;    // anchor slots (blocks)
  std::int64_t B = 0;    // block size
  std::int64_t T = 0;    // N B block rows
  std::int64_t H = 0;    // hidden
  std::int64_t I = 0;    // intermediate
  std::int64_t nh = 0;   // query heads
  std::int64_t nkv = 0;  // key/value heads
  std::int64_t d = 0;    // head dim
  std::int64_t K = 0;    // target layers feeding the drafter
  std::int64_t V = 0;    // vocabulary
  std::int64_t L = 0;    // drafter layers

  static DrafterDims of(const DrafterConfig& c, std::int64_t context_length, std::int64_t anchor_slots) {
    return DrafterDims{context_length, anchor_slots,           c.block_size,          anchor_slots * c.block_size,
                       c.hidden_size,  c.intermediate_size,    c.num_attention_heads, c.num_key_value_heads,
                       c.head_dim,     c.num_feature_layers(), c.vocab_size,          c.num_hidden_layers};
  }
  std::int64_t q_width() const { return nh * d; }
  std::int64_t kv_width() const { return nkv * d; }
  std::int64_t feature_width() const { return K * H; }
  std::int64_t keys() const { return S + T; }  // [context keys; block keys]
};

}  // namespace dflash
