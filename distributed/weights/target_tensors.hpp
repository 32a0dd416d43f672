// The frozen embedding and lm_head (SPEC §2) from the target's Hugging Face checkpoint directory
// (TRAINING §16): `model.safetensors`, or shards listed by `model.safetensors.index.json`; names
// `model.embed_tokens.weight` and `lm_head.weight`, or the embedding alone (used as both) when the
// directory's config.json says `tie_word_embeddings: true`. BF16, F16 and F32 are read and
// converted exactly to double. Only those two tensors are read, whatever else the target holds.
#pragma once

#include <filesystem>

#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

inline constexpr const char* kTargetEmbeddingName = "model.embed_tokens.weight";
inline constexpr const char* kTargetLmHeadName = "lm_head.weight";

// Whether config.json in `target_dir` sets tie_word_embeddings (absent file or key: false).
bool target_ties_word_embeddings(const std::filesystem::path& target_dir);

// Throws dflash::InputError naming the file and tensor: a missing tensor, a dtype other than
// BF16/F16/F32, a shape other than [vocab_size, hidden_size] of `config`, a non-finite value.
FrozenWeights<double> load_target_weights(MemoryTracker& tracker, const std::filesystem::path& target_dir,
                                          const DrafterConfig& config);

}  // namespace dflash
