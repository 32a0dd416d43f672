// The Hugging Face drafter directory (TRAINING §16) that DFlash inference code (z-lab model.py,
// SGLang, vLLM) loads unchanged, and its import (`--init`, to start from a released drafter).
//
// Export writes
//   config.json        architectures = ["DFlashDraftModel"], the model fields (SPEC §1), block_size,
//                      dflash_config = {mask_token_id, target_layer_ids}, and the Qwen3 fields a
//                      loader checks (model_type, hidden_act silu, attention_bias false, rope_scaling
//                      null, use_sliding_window, tie_word_embeddings false, torch_dtype bfloat16);
//                      never `is_causal` (serving treats sliding layers as causal and full layers as
//                      bidirectional, as SPEC §3's mask does).
//   model.safetensors  every trainable tensor in BF16 under its SPEC §3 name.
// Both are written to temporary names and renamed; the directory is created if needed.
//
// Import reads config.json through the drafter config loader (which refuses, naming the key, every
// value this implementation would mis-model) and the weights from model.safetensors or a sharded
// index, in BF16, F16, F32 or F64. A model field on which the run's config and the directory
// disagree is refused, naming both values.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

// config.json of an exported drafter.
nlohmann::json exported_drafter_config(const DrafterConfig& config);

void export_drafter(const std::filesystem::path& out, const DrafterConfig& config,
                    const DrafterParameters<double>& params);

// Throws dflash::InputError naming the field and both values when a SPEC §1 model field of
// `imported` differs from `run` (`imported_source` names the directory's config.json).
void require_same_model_fields(const DrafterConfig& run, const DrafterConfig& imported,
                               std::string_view imported_source);

struct ImportedDrafter {
  DrafterConfig config;              // the directory's config.json
  DrafterParameters<double> params;  // exact values of the stored dtype
};

// Reads `dir` (config.json + weights); with `run`, refuses model fields that differ from it before
// reading any weight. Throws dflash::InputError naming the file, tensor or key.
ImportedDrafter import_drafter(MemoryTracker& tracker, const std::filesystem::path& dir,
                               const DrafterConfig* run = nullptr);

// import_drafter against the run's config.
DrafterParameters<double> import_drafter_for_run(MemoryTracker& tracker, const std::filesystem::path& dir,
                                                 const DrafterConfig& run);

}  // namespace dflash
