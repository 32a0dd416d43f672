#include "distributed/weights/target_tensors.hpp"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/hf_checkpoint.hpp"
#include "io/json_fields.hpp"

namespace dflash {

bool target_ties_word_embeddings(const std::filesystem::path& target_dir) {
  const auto path = target_dir / "config.json";
  std::error_code absent;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, absent))) return false;
  const nlohmann::json j = read_json_file(path);
  if (!j.is_object()) throw_input_error(path.string(), "is not a JSON object");
  if (!j.contains("tie_word_embeddings")) return false;
  const nlohmann::json& v = j.at("tie_word_embeddings");
  if (!v.is_boolean())
    throw_input_error(str(path.string(), ": tie_word_embeddings"), str(v.dump(), " is not true or false"));
  return v.get<bool>();
}

namespace {

Tensor<double> frozen_tensor(MemoryTracker& tracker, const HfCheckpoint& checkpoint, const std::filesystem::path& dir,
                             const char* name, const DrafterConfig& config) {
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
  Tensor<double> t(tracker, MemoryCategory::frozen, want, checkpoint.doubles(name));
  for (std::int64_t e = 0; e < t.numel(); ++e) {
    if (!std::isfinite(t[e]))
      throw_input_error(where, str("element ", e, " is ", t[e], "; every value must be finite"));
  }
  return t;
}

}  // namespace

FrozenWeights<double> load_target_weights(MemoryTracker& tracker, const std::filesystem::path& target_dir,
                                          const DrafterConfig& config) {
  std::error_code ec;
  if (!std::filesystem::is_directory(target_dir, ec)) {
    throw_input_error("--target", str("'", target_dir.string(), "' is not a directory"));
  }
  const bool tied = target_ties_word_embeddings(target_dir);
  const HfCheckpoint checkpoint = HfCheckpoint::open(target_dir);
  for (const char* name : {kTargetEmbeddingName, kTargetLmHeadName}) {
    if (tied && name == kTargetLmHeadName) continue;
    if (!checkpoint.contains(name)) {
      throw_input_error(
          str("--target ", target_dir.string()),
          str("tensor '", name, "' is missing",
              tied ? "" : " (config.json does not set tie_word_embeddings, so lm_head.weight is required)"));
    }
  }
  FrozenWeights<double> f;
  f.embed_tokens = frozen_tensor(tracker, checkpoint, target_dir, kTargetEmbeddingName, config);
  f.lm_head = frozen_tensor(tracker, checkpoint, target_dir, tied ? kTargetEmbeddingName : kTargetLmHeadName, config);
  return f;
}

}  // namespace dflash
