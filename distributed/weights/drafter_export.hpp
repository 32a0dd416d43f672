// The Hugging Face drafter directory (TRAINING §16) that DFlash inference code (z-lab model.py,
// SGLang, vLLM) loads unchanged, and its import (`--init`, to start from a released drafter).
//
// Export writes
//   config.json        for a run started from a released drafter (--init): that drafter's
//                      config.json verbatim, every key this project does not model kept as it was,
//                      every key it models (SPEC §1's model fields, num_target_layers,
//                      use_sliding_window) set to the run's value where it differs, in the
//                      place the released config keeps it (top level, dflash_config or
//                      rope_parameters). For a fresh run: the keys a released drafter has —
//                      architectures ["DFlashDraftModel"], auto_map, model_type qwen3, the model
//                      fields (SPEC §1), block_size, num_target_layers (the TARGET's layer count,
//                      which SGLang checks every target_layer_id against), dflash_config =
//                      {mask_token_id, target_layer_ids}, hidden_act silu, attention_bias false,
//                      rope_scaling null, use_sliding_window, tie_word_embeddings false,
//                      initializer_range (the seeded init's 0.02), torch_dtype bfloat16. Never
//                      `is_causal` (serving treats sliding layers as causal and full layers as
//                      bidirectional, as SPEC §3's mask does).
//   model.safetensors  every trainable tensor in BF16 under its SPEC §3 name, unprefixed (vLLM adds
//                      `model.`; SGLang accepts both), each value checked finite first.
// Both are written to temporary names and renamed; the directory is created if needed.
//
// Import reads config.json through the drafter config loader (which refuses, naming the key, every
// value this implementation would mis-model) and the weights from model.safetensors or a sharded
// index, in BF16, F16, F32 or F64. A model field on which the run's config and the directory
// disagree is refused, naming both values, and so is a tensor the config does not model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/hf_checkpoint.hpp"
#include "io/safetensors.hpp"
#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

// The key of a run's recorded config (the checkpoint's) that holds the --init directory's
// config.json verbatim.
inline constexpr const char* kInitConfigKey = "init_config";

// The dtype of every exported tensor.
inline constexpr safetensors::Dtype kExportDtype = safetensors::Dtype::BF16;

// The `auto_map` released DFlash drafters carry, which transformers' trust_remote_code loading
// resolves against the dflash.py module shipped next to a released drafter's config.
nlohmann::json released_auto_map();

// config.json of an exported drafter (above); `released` is the --init directory's config.json.
// InputError when config.num_target_layers is unknown.
nlohmann::json exported_drafter_config(const DrafterConfig& config, const nlohmann::json* released = nullptr);

// What model.safetensors holds: every tensor's name, dtype and shape, in the file's order.
struct ExportedTensor {
  std::string name;
  safetensors::Dtype dtype;
  safetensors::Shape shape;
};
std::vector<ExportedTensor> exported_tensors(const DrafterConfig& config);

// Throws InputError naming the tensor and element for a non-finite weight, before writing anything.
void export_drafter(const std::filesystem::path& out, const DrafterConfig& config,
                    const DrafterParameters<double>& params, const nlohmann::json* released = nullptr);

// The flag that names a drafter directory in messages: the trainer's `--init`, or `golden
// generate --weights`, which takes a golden's parameters from the same directories.
inline constexpr std::string_view kInitFlag = "--init";

// Throws dflash::InputError naming the field and both values when a SPEC §1 model field of
// `imported` differs from `run` (`imported_source` names the directory's config.json, `flag` the
// option that named the directory).
void require_same_model_fields(const DrafterConfig& run, const DrafterConfig& imported,
                               std::string_view imported_source, std::string_view flag = kInitFlag);

struct ImportedDrafter {
  DrafterConfig config;              // the directory's config.json
  DrafterParameters<double> params;  // exact values of the stored dtype
};

// A drafter directory opened for reading: its config.json read (with `run`, held to the run's model
// fields first), and every tensor checked (each parameter present in a float dtype and its shape,
// nothing the config does not model) before any value is read. Values are read as asked, exactly,
// each checked finite: a rank that keeps only its optimizer part reads that part of the weights
// (3 P / R values), not P (13.8 GB of doubles a rank at full scale). Throws dflash::InputError
// naming the file, tensor (and its element) or key, and `flag`.
class DrafterWeightsReader {
 public:
  static DrafterWeightsReader open(const std::filesystem::path& dir, const DrafterConfig* run = nullptr,
                                   std::string_view flag = kInitFlag);
  const DrafterConfig& config() const { return config_; }
  // Elements [first, first + out.size()) of the parameters as one flat vector (canonical order, P
  // values; 0 at or past P, ZeRO-1's padding).
  void read_flat(std::int64_t first, std::span<double> out) const;

 private:
  DrafterWeightsReader(DrafterConfig config, HfCheckpoint checkpoint, std::filesystem::path dir);
  DrafterConfig config_;
  HfCheckpoint checkpoint_;
  std::filesystem::path dir_;
  std::vector<ParameterShape> shapes_;  // of config_, and their element counts: every read_flat's runs
  std::vector<std::int64_t> sizes_;
};

// Reads `dir` (config.json + weights); with `run`, refuses model fields that differ from it before
// reading any weight. Throws dflash::InputError naming the file, tensor or key (and `flag`).
ImportedDrafter import_drafter(MemoryTracker& tracker, const std::filesystem::path& dir,
                               const DrafterConfig* run = nullptr, std::string_view flag = kInitFlag);

// import_drafter against the run's config.
DrafterParameters<double> import_drafter_for_run(MemoryTracker& tracker, const std::filesystem::path& dir,
                                                 const DrafterConfig& run);

}  // namespace dflash
