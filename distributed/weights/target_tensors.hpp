// The frozen embedding and lm_head (SPEC §2) from the target's Hugging Face checkpoint directory
// (TRAINING §16): `model.safetensors`, or shards listed by `model.safetensors.index.json`; names
// `model.embed_tokens.weight` and `lm_head.weight`, or the embedding alone (used as both) when the
// directory's config.json says `tie_word_embeddings: true`. BF16, F16 and F32 are read and
// converted exactly to double. Only those two tensors are read, whatever else the target holds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "io/hf_checkpoint.hpp"
#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"
#include "reference/frozen_weight_source.hpp"

namespace dflash {

inline constexpr const char* kTargetEmbeddingName = "model.embed_tokens.weight";
inline constexpr const char* kTargetLmHeadName = "lm_head.weight";

// Whether config.json in `target_dir` sets tie_word_embeddings (absent file or key: false).
bool target_ties_word_embeddings(const std::filesystem::path& target_dir);

// The target's depth: num_hidden_layers of config.json in `target_dir` (nothing when the file or
// the key is absent; InputError naming the file when it is not a positive integer).
std::optional<std::int64_t> target_num_hidden_layers(const std::filesystem::path& target_dir);

// The run's num_target_layers, in the meaning DFlash drafter configs and their loaders give it
// (the target's depth, not K): the target's num_hidden_layers, which the drafter config's and the
// --init directory's num_target_layers must equal where they give one; where the target does not
// say, the value they agree on. InputError naming both values on a disagreement, and naming the
// three places when none of them gives it. Sources name the files in messages.
struct TargetDepthSources {
  const DrafterConfig& config;
  std::string_view config_source;           // --config's file
  const std::filesystem::path& target_dir;  // --target
  const DrafterConfig* init = nullptr;      // --init's config.json, if given
  std::string_view init_source = {};
};
std::int64_t resolve_target_depth(const TargetDepthSources& sources);

// The target's E and W_lm, opened and checked but not read: open() throws dflash::InputError
// naming the file and tensor for a missing tensor, a dtype other than BF16/F16/F32, a shape other
// than [vocab_size, hidden_size] of `config`; read() reads only the elements asked for, converts
// them exactly and refuses a non-finite one by file, tensor and element. `dflash train` hands it to
// the step backend, which reads it whole (the reference) or a piece at a time into its own bf16
// copy (a device backend: the host never holds the target's values).
class TargetWeights final : public FrozenWeightSource {
 public:
  static TargetWeights open(const std::filesystem::path& target_dir, const DrafterConfig& config);
  void read(FrozenTensor which, std::int64_t first, std::span<double> out) const override;

 private:
  TargetWeights(HfCheckpoint checkpoint, bool tied);
  HfCheckpoint checkpoint_;
  std::string names_[2];  // per FrozenTensor: the checkpoint's tensor (tied: the embedding twice)
  std::string where_[2];  // "<shard file>: tensor '<name>'", for messages
};

// TargetWeights::open(target_dir, config), read whole in double (load_frozen_weights).
FrozenWeights<double> load_target_weights(MemoryTracker& tracker, const std::filesystem::path& target_dir,
                                          const DrafterConfig& config);

}  // namespace dflash
