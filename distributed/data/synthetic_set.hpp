// A synthetic target and feature set for a drafter config (`dflash data synth`): for tests, the
// README walk-through and a user's dry run of the whole pipeline without a target model.
//
// The next tokens are learnable: text follows a fixed successor map t -> succ(t) (an affine map
// mod V-1 that skips mask_token_id), except that with probability `noise` a token is drawn
// uniformly instead. Row p of the target features encodes x[p] (a fixed random code per token,
// the same in each of the K slots, plus small noise), and the teacher's hidden state G[p] points
// along W_lm's row of x[p+1] (the teacher knows the next token). A drafter that learns succ
// predicts most block tokens from the anchor token alone, so the loss falls within a few steps.
//
// Written:
//   <out>/target/config.json        hidden_size, num_hidden_layers, vocab_size, tie_word_embeddings = false
//   <out>/target/model.safetensors  model.embed_tokens.weight, lm_head.weight (BF16, as HF ships them)
//   <out>/features/shard-NNNNN.safetensors   `shards` shards of the feature set
#pragma once

#include <cstdint>
#include <filesystem>

#include "io/safetensors_dtype.hpp"
#include "reference/drafter_config.hpp"

namespace dflash {

struct SyntheticDataSpec {
  std::int64_t sequences = 64;
  std::int64_t shards = 2;
  std::int64_t min_length = 16;  // rows per sequence, uniform in [min_length, max_length]
  std::int64_t max_length = 32;
  double noise = 0.1;  // probability that a token is not its predecessor's successor
  std::uint64_t seed = 1;
  safetensors::Dtype feature_dtype = safetensors::Dtype::BF16;
};

// Throws dflash::InputError naming the field for a bad spec (before anything is written).
void validate_synthetic_data_spec(const SyntheticDataSpec& spec);

// The successor of token t (never mask_token_id; V >= 2).
std::int64_t synthetic_successor(const DrafterConfig& config, std::int64_t token);

// The synthetic target's depth (its config.json's num_hidden_layers): the config's
// num_target_layers, else just deep enough for its deepest target_layer_id, so that a run knows it
// as it would a real target's (TRAINING §16).
std::int64_t synthetic_target_depth(const DrafterConfig& config);

// Writes <out>/target and <out>/features. `out` must not exist yet or be an empty directory.
void write_synthetic_data(const DrafterConfig& config, const SyntheticDataSpec& spec, const std::filesystem::path& out);

}  // namespace dflash
