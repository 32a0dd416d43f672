#include "distributed/weights/drafter_export.hpp"

#include <cmath>
#include <fstream>

#include "io/errors.hpp"
#include "io/file_write.hpp"
#include "io/hf_checkpoint.hpp"
#include "io/safetensors.hpp"

namespace dflash {

using nlohmann::json;

namespace {

// SPEC §1's model fields: what the weights' meaning depends on.
constexpr const char* kModelFields[] = {
    "hidden_size",       "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "num_hidden_layers", "rms_norm_eps",      "rope_theta",          "vocab_size",          "block_size",
    "mask_token_id",     "target_layer_ids",  "layer_types",         "sliding_window"};

}  // namespace

json exported_drafter_config(const DrafterConfig& c) {
  const json all = drafter_config_to_json(c);
  json j;
  j["architectures"] = {"DFlashDraftModel"};
  j["model_type"] = "qwen3";
  for (const char* field : kModelFields) {
    if (std::string_view(field) == "mask_token_id" || std::string_view(field) == "target_layer_ids") continue;
    j[field] = all.at(field);
  }
  j["dflash_config"] = {{"mask_token_id", c.mask_token_id}, {"target_layer_ids", c.target_layer_ids}};
  j["num_target_layers"] = c.num_target_layers();
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["rope_scaling"] = nullptr;
  j["use_sliding_window"] = c.has_sliding_layer();
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "bfloat16";
  return j;
}

void export_drafter(const std::filesystem::path& out, const DrafterConfig& config,
                    const DrafterParameters<double>& params) {
  validate_drafter_config(config);
  std::filesystem::create_directories(out);
  safetensors::Writer w;
  w.set_metadata("format", "pt");
  params.for_each([&](const std::string& name, const Tensor<double>& t) {
    w.add_floats(name, safetensors::Dtype::BF16, t.shape(), t.span());
  });
  w.write_file(out / "model.safetensors");
  write_file_atomically(out / "config.json", exported_drafter_config(config).dump(2) + "\n");
}

void require_same_model_fields(const DrafterConfig& run, const DrafterConfig& imported,
                               std::string_view imported_source) {
  const json a = drafter_config_to_json(run), b = drafter_config_to_json(imported);
  for (const char* field : kModelFields) {
    if (a.at(field) != b.at(field)) {
      throw_input_error(field, str("--config has ", a.at(field).dump(), " but ", imported_source, " has ",
                                   b.at(field).dump(), " (the --init weights were trained for the latter)"));
    }
  }
}

ImportedDrafter import_drafter(MemoryTracker& tracker, const std::filesystem::path& dir, const DrafterConfig* run) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw_input_error("--init", str("'", dir.string(), "' is not a directory"));
  ImportedDrafter d{load_drafter_config(dir / "config.json"), {}};
  // The config first: weights of another shape are explained by the field, not the tensor.
  if (run != nullptr) require_same_model_fields(*run, d.config, (dir / "config.json").string());
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  d.params = make_drafter_parameters<double>(tracker, d.config, MemoryCategory::parameters);
  d.params.for_each([&](const std::string& name, Tensor<double>& t) {
    if (!checkpoint.contains(name))
      throw_input_error(str("--init ", dir.string()), str("tensor '", name, "' is missing"));
    const std::string where = str((dir / checkpoint.shard_of(name)).string(), ": tensor '", name, "'");
    const safetensors::TensorInfo& info = checkpoint.info(name);
    if (!safetensors::dtype_is_float(info.dtype)) {
      throw_input_error(where, str("dtype ", safetensors::dtype_name(info.dtype), " is not BF16, F16, F32 or F64"));
    }
    if (info.shape != t.shape()) {
      throw_input_error(where, str("shape ", safetensors::format_shape(info.shape), " is not ",
                                   safetensors::format_shape(t.shape()), " of its config.json"));
    }
    const std::vector<double> values = checkpoint.doubles(name);
    for (std::size_t e = 0; e < values.size(); ++e) {
      if (!std::isfinite(values[e]))
        throw_input_error(where, str("element ", e, " is ", values[e], "; every value must be finite"));
      t[std::int64_t(e)] = values[e];
    }
  });
  return d;
}

DrafterParameters<double> import_drafter_for_run(MemoryTracker& tracker, const std::filesystem::path& dir,
                                                 const DrafterConfig& run) {
  return std::move(import_drafter(tracker, dir, &run).params);
}

}  // namespace dflash
