#include "distributed/weights/target_tensors.hpp"

#include <cmath>
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/hf_checkpoint.hpp"
#include "io/json_fields.hpp"

namespace dflash {

namespace {

// The target's config.json, or nothing when the directory has none.
std::optional<nlohmann::json> target_config(const std::filesystem::path& path) {
  std::error_code absent;  // a link is not absent: read_json_file refuses a dangling one by name
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, absent))) return std::nullopt;
  nlohmann::json j = read_json_file(path);
  if (!j.is_object()) throw_input_error(path.string(), "is not a JSON object");
  return j;
}

}  // namespace

bool target_ties_word_embeddings(const std::filesystem::path& target_dir) {
  const auto path = target_dir / "config.json";
  const std::optional<nlohmann::json> config = target_config(path);
  if (!config) return false;
  const nlohmann::json& j = *config;
  if (!j.contains("tie_word_embeddings")) return false;
  const nlohmann::json& v = j.at("tie_word_embeddings");
  if (!v.is_boolean())
    throw_input_error(str(path.string(), ": tie_word_embeddings"), str(v.dump(), " is not true or false"));
  return v.get<bool>();
}

std::optional<std::int64_t> target_num_hidden_layers(const std::filesystem::path& target_dir) {
  const auto path = target_dir / "config.json";
  const std::optional<nlohmann::json> config = target_config(path);
  if (!config) return std::nullopt;
  // Multimodal targets keep the language model's fields under text_config.
  const nlohmann::json& j =
      config->contains("text_config") && config->at("text_config").is_object() && !config->contains("num_hidden_layers")
          ? config->at("text_config")
          : *config;
  if (!j.contains("num_hidden_layers") || j.at("num_hidden_layers").is_null()) return std::nullopt;
  const nlohmann::json& v = j.at("num_hidden_layers");
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 ||
      (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(INT64_MAX))) {
    throw_input_error(str(path.string(), ": num_hidden_layers"), str(v.dump(), " is not a positive integer"));
  }
  return v.get<std::int64_t>();
}

std::int64_t resolve_target_depth(const TargetDepthSources& s) {
  struct Place {
    std::string name;
    std::optional<std::int64_t> value;
  };
  const Place places[] = {
      {str("num_hidden_layers of --target ", (s.target_dir / "config.json").string()),
       target_num_hidden_layers(s.target_dir)},
      {str("num_target_layers in ", s.config_source), s.config.num_target_layers},
      {str("num_target_layers in --init ", s.init_source),
       s.init != nullptr ? s.init->num_target_layers : std::nullopt},
  };
  const Place* found = nullptr;
  for (const Place& place : places) {
    if (!place.value) continue;
    if (found != nullptr && *found->value != *place.value) {
      throw_input_error("num_target_layers", str(found->name, " is ", *found->value, " but ", place.name, " is ",
                                                 *place.value, " (both must be the target model's layer count)"));
    }
    if (found == nullptr) found = &place;
  }
  if (found == nullptr) {
    throw_input_error("num_target_layers", str("the target's layer count is unknown: ", places[0].name,
                                               " is absent, and neither ", s.config_source,
                                               " nor --init sets num_target_layers (an export needs it; serving "
                                               "stacks refuse target_layer_ids at or above it)"));
  }
  return *found->value;
}

namespace {

// Checks the tensor's dtype and shape (its values are read later, as asked); returns where it is,
// for messages.
std::string checked_frozen_tensor(const HfCheckpoint& checkpoint, const std::filesystem::path& dir, const char* name,
                                  const DrafterConfig& config) {
  const std::string where = str((dir / checkpoint.shard_of(name)).string(), ": tensor '", name, "'");
  const safetensors::TensorInfo& info = checkpoint.info(name);
  using safetensors::Dtype;
  if (info.dtype != Dtype::BF16 && info.dtype != Dtype::F16 && info.dtype != Dtype::F32) {
    throw_input_error(where, str("dtype ", safetensors::dtype_name(info.dtype), " is not BF16, F16 or F32"));
  }
  const safetensors::Shape want{config.vocab_size, config.hidden_size};
  if (info.shape != want) {
    throw_input_error(
        where, str("shape ", safetensors::format_shape(info.shape),
                   " is not [vocab_size, hidden_size] = ", safetensors::format_shape(want), " of the drafter config"));
  }
  return where;
}

}  // namespace

TargetWeights TargetWeights::open(const std::filesystem::path& target_dir, const DrafterConfig& config) {
  std::error_code ec;
  if (!std::filesystem::is_directory(target_dir, ec)) {
    throw_input_error("--target", str("'", target_dir.string(), "' is not a directory"));
  }
  const bool tied = target_ties_word_embeddings(target_dir);
  HfCheckpoint checkpoint = HfCheckpoint::open(target_dir);
  for (const char* name : {kTargetEmbeddingName, kTargetLmHeadName}) {
    if (tied && name == kTargetLmHeadName) continue;
    if (!checkpoint.contains(name)) {
      throw_input_error(
          str("--target ", target_dir.string()),
          str("tensor '", name, "' is missing",
              tied ? "" : " (config.json does not set tie_word_embeddings, so lm_head.weight is required)"));
    }
  }
  TargetWeights t(std::move(checkpoint), tied);
  for (int k = 0; k < 2; ++k)
    t.where_[k] = checked_frozen_tensor(t.checkpoint_, target_dir, t.names_[k].c_str(), config);
  return t;
}

TargetWeights::TargetWeights(HfCheckpoint checkpoint, bool tied)
    : checkpoint_(std::move(checkpoint)),
      names_{kTargetEmbeddingName, tied ? kTargetEmbeddingName : kTargetLmHeadName} {}

void TargetWeights::read(FrozenTensor which, std::int64_t first, std::span<double> out) const {
  const int k = which == FrozenTensor::embed_tokens ? 0 : 1;
  checkpoint_.read_float_elements(names_[k], std::uint64_t(first), out);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      throw_input_error(where_[k],
                        str("element ", first + std::int64_t(i), " is ", out[i], "; every value must be finite"));
    }
  }
}

FrozenWeights<double> load_target_weights(MemoryTracker& tracker, const std::filesystem::path& target_dir,
                                          const DrafterConfig& config) {
  return load_frozen_weights(tracker, config, TargetWeights::open(target_dir, config));
}

}  // namespace dflash
