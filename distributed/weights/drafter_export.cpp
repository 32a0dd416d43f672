#include "distributed/weights/drafter_export.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "distributed/weights/drafter_init.hpp"
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

json released_auto_map() { return {{"AutoModel", "dflash.DFlashDraftModel"}}; }

namespace {

// Sets `key` to `value` wherever the config already holds it (top level, dflash_config, and for
// rope_theta rope_parameters) and differs, leaving an equal value as written (1000000 stays an
// integer); where it holds it nowhere, adds it at the top level or, with `in_dflash_config`, in
// dflash_config.
void set_model_key(json& config, const std::string& key, const json& value, bool in_dflash_config) {
  bool found = false;
  auto visit = [&](json& object) {
    if (!object.is_object() || !object.contains(key)) return;
    found = true;
    if (object.at(key) != value) object[key] = value;
  };
  visit(config);
  if (config.contains("dflash_config")) visit(config["dflash_config"]);
  if (key == "rope_theta" && config.contains("rope_parameters")) visit(config["rope_parameters"]);
  if (!found) (in_dflash_config ? config["dflash_config"] : config)[key] = value;
}

}  // namespace

json exported_drafter_config(const DrafterConfig& c, const json* released) {
  if (!c.num_target_layers) {
    throw_input_error("num_target_layers",
                      "the target's layer count is unknown (the run did not record it); pass the target "
                      "directory (--target) so that the export can write it");
  }
  validate_drafter_config(c, "the exported config");
  json j = released != nullptr ? *released : json::object();
  if (released == nullptr) {
    j["architectures"] = {"DFlashDraftModel"};
    j["auto_map"] = released_auto_map();
    j["model_type"] = "qwen3";
    j["hidden_act"] = "silu";
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
    j["rope_scaling"] = nullptr;
    j["tie_word_embeddings"] = false;
    j["initializer_range"] = kInitStandardDeviation;
    j["torch_dtype"] = "bfloat16";
    j["use_cache"] = true;
  }
  const json all = drafter_config_to_json(c);
  for (const char* field : kModelFields) {
    const std::string key = field;
    set_model_key(j, key, all.at(key), key == "mask_token_id" || key == "target_layer_ids");
  }
  set_model_key(j, "num_target_layers", *c.num_target_layers, false);
  set_model_key(j, "use_sliding_window", c.has_sliding_layer(), false);
  if (!j.contains("architectures")) j["architectures"] = {"DFlashDraftModel"};
  return j;
}

std::vector<ExportedTensor> exported_tensors(const DrafterConfig& config) {
  std::vector<ExportedTensor> tensors;
  for (const ParameterShape& p : drafter_parameter_shapes(config)) tensors.push_back({p.name, kExportDtype, p.shape});
  return tensors;
}

void export_drafter(const std::filesystem::path& out, const DrafterConfig& config,
                    const DrafterParameters<double>& params, const json* released) {
  validate_drafter_config(config);
  const std::string config_text = exported_drafter_config(config, released).dump(2) + "\n";
  // Serving stacks would load a NaN drafter without a word: refuse it before writing anything. A
  // finite master weight at or past the export dtype's rounding boundary (in bf16 |w| >= 3.3962e38,
  // half an ulp above the largest value) would be written as inf, so the check is on the value as
  // it is stored.
  params.for_each([&](const std::string& name, const Tensor<double>& t) {
    for (std::int64_t e = 0; e < t.numel(); ++e) {
      std::byte stored[8];
      safetensors::store_float_element(kExportDtype, t[e], stored);
      if (!std::isfinite(safetensors::load_float_element(kExportDtype, stored))) {
        throw_input_error(
            str("tensor '", name, "'"),
            str("element ", e, " is ", t[e],
                std::isfinite(t[e]) ? str(", which ", safetensors::dtype_name(kExportDtype), " rounds to infinity")
                                    : std::string(),
                "; an exported drafter must hold finite weights"));
      }
    }
  });
  const std::vector<ExportedTensor> tensors = exported_tensors(config);
  std::filesystem::create_directories(out);
  safetensors::Writer w;
  w.set_metadata("format", "pt");
  std::size_t index = 0;
  params.for_each([&](const std::string& name, const Tensor<double>& t) {
    const ExportedTensor& e = tensors.at(index++);
    if (e.name != name || e.shape != t.shape()) throw std::logic_error(str("export: tensor ", name, " out of order"));
    w.add_floats(name, e.dtype, t.shape(), t.span());
  });
  w.write_file(out / "model.safetensors");
  write_file_atomically(out / "config.json", config_text);
}

void require_same_model_fields(const DrafterConfig& run, const DrafterConfig& imported,
                               std::string_view imported_source, std::string_view flag) {
  const json a = drafter_config_to_json(run), b = drafter_config_to_json(imported);
  for (const char* field : kModelFields) {
    if (a.at(field) != b.at(field)) {
      throw_input_error(field, str("--config has ", a.at(field).dump(), " but ", imported_source, " has ",
                                   b.at(field).dump(), " (the ", flag, " weights were trained for the latter)"));
    }
  }
}

DrafterWeightsReader::DrafterWeightsReader(DrafterConfig config, HfCheckpoint checkpoint, std::filesystem::path dir)
    : config_(std::move(config)),
      checkpoint_(std::move(checkpoint)),
      dir_(std::move(dir)),
      shapes_(drafter_parameter_shapes(config_)),
      sizes_(parameter_sizes(shapes_)) {}

DrafterWeightsReader DrafterWeightsReader::open(const std::filesystem::path& dir, const DrafterConfig* run,
                                                std::string_view flag) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw_input_error(flag, str("'", dir.string(), "' is not a directory"));
  DrafterConfig config = load_drafter_config(dir / "config.json");
  // The config first: weights of another shape are explained by the field, not the tensor.
  if (run != nullptr) require_same_model_fields(*run, config, (dir / "config.json").string(), flag);
  HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  // A tensor the config does not model (a bias without attention_bias, a layer beyond
  // num_hidden_layers, an embedding) would be silently dropped from training and from the export.
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
  std::set<std::string> modelled;
  for (const ParameterShape& p : shapes) modelled.insert(p.name);
  for (const std::string& name : checkpoint.names()) {
    if (!modelled.contains(name)) {
      throw_input_error(str(flag, " ", (dir / checkpoint.shard_of(name)).string()),
                        str("tensor '", name, "' is not a parameter of this drafter config (", config.num_hidden_layers,
                            " layers, no biases); remove it, or use a config that models it"));
    }
  }
  for (const ParameterShape& p : shapes) {
    if (!checkpoint.contains(p.name))
      throw_input_error(str(flag, " ", dir.string()), str("tensor '", p.name, "' is missing"));
    const std::string where = str((dir / checkpoint.shard_of(p.name)).string(), ": tensor '", p.name, "'");
    const safetensors::TensorInfo& info = checkpoint.info(p.name);
    if (!safetensors::dtype_is_float(info.dtype)) {
      throw_input_error(where, str("dtype ", safetensors::dtype_name(info.dtype), " is not BF16, F16, F32 or F64"));
    }
    if (info.shape != p.shape) {
      throw_input_error(where, str("shape ", safetensors::format_shape(info.shape), " is not ",
                                   safetensors::format_shape(p.shape), " of its config.json"));
    }
  }
  return DrafterWeightsReader(std::move(config), std::move(checkpoint), dir);
}

void DrafterWeightsReader::read_flat(std::int64_t first, std::span<double> out) const {
  std::fill(out.begin(), out.end(), 0.0);
  for (const FlatRun& r : flat_runs(sizes_, first, std::int64_t(out.size()))) {
    const std::string& name = shapes_[r.tensor].name;
    const std::span<double> part = out.subspan(std::size_t(r.position), std::size_t(r.length));
    checkpoint_.read_float_elements(name, std::uint64_t(r.at), part);
    for (std::size_t i = 0; i < part.size(); ++i) {
      if (!std::isfinite(part[i])) {
        throw_input_error(str((dir_ / checkpoint_.shard_of(name)).string(), ": tensor '", name, "'"),
                          str("element ", r.at + std::int64_t(i), " is ", part[i], "; every value must be finite"));
      }
    }
  }
}

ImportedDrafter import_drafter(MemoryTracker& tracker, const std::filesystem::path& dir, const DrafterConfig* run,
                               std::string_view flag) {
  const DrafterWeightsReader reader = DrafterWeightsReader::open(dir, run, flag);
  ImportedDrafter d{reader.config(),
                    make_drafter_parameters<double>(tracker, reader.config(), MemoryCategory::parameters)};
  std::int64_t offset = 0;
  d.params.for_each([&](const std::string&, Tensor<double>& t) {
    reader.read_flat(offset, std::span<double>(t.data(), std::size_t(t.numel())));
    offset += t.numel();
  });
  return d;
}

DrafterParameters<double> import_drafter_for_run(MemoryTracker& tracker, const std::filesystem::path& dir,
                                                 const DrafterConfig& run) {
  return std::move(import_drafter(tracker, dir, &run).params);
}

}  // namespace dflash
