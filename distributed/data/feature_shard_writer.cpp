#include "distributed/data/feature_shard_writer.hpp"

#include <nlohmann/json.hpp>

#include "distributed/data/feature_shard.hpp"

namespace dflash {

void FeatureShardContents::append(const std::vector<std::int64_t>& seq_tokens,
                                  const std::vector<std::int64_t>& seq_mask, const std::vector<double>& features,
                                  const std::vector<double>& teacher) {
  tokens.insert(tokens.end(), seq_tokens.begin(), seq_tokens.end());
  loss_mask.insert(loss_mask.end(), seq_mask.begin(), seq_mask.end());
  target_features.insert(target_features.end(), features.begin(), features.end());
  teacher_hidden.insert(teacher_hidden.end(), teacher.begin(), teacher.end());
  offsets.push_back(offsets.back() + std::int64_t(seq_tokens.size()));
}

safetensors::Writer feature_shard_writer(const FeatureShardContents& s, safetensors::Dtype float_dtype) {
  using safetensors::Dtype;
  const std::int64_t rows = s.offsets.back(), H = s.hidden_size, KH = std::int64_t(s.target_layer_ids.size()) * H;
  safetensors::Writer w;
  w.set_metadata("format", std::string(kFeatureShardFormat));
  w.set_metadata("version", std::string(kFeatureShardVersion));
  w.set_metadata("hidden_size", std::to_string(H));
  w.set_metadata("target_layer_ids", nlohmann::json(s.target_layer_ids).dump());
  w.set_metadata("num_sequences", std::to_string(s.offsets.size() - 1));
  if (!s.target_model.empty()) w.set_metadata("target_model", s.target_model);
  w.add_integers("offsets", Dtype::I64, {std::int64_t(s.offsets.size())}, s.offsets);
  w.add_integers("tokens", Dtype::I32, {rows}, s.tokens);
  w.add_integers("loss_mask", Dtype::U8, {rows}, s.loss_mask);
  w.add_floats("target_features", float_dtype, {rows, KH}, s.target_features);
  w.add_floats("teacher_hidden", float_dtype, {rows, H}, s.teacher_hidden);
  return w;
}

void write_feature_shard(const std::filesystem::path& path, const FeatureShardContents& shard,
                         safetensors::Dtype float_dtype) {
  feature_shard_writer(shard, float_dtype).write_file(path);
}

}  // namespace dflash
