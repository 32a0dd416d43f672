// Writing one feature shard (the layout of feature_shard.hpp): packed sequences, offsets and the
// metadata, atomically (temporary name, then rename). Used by `dflash data synth` and the tests;
// shards from a real target are written by Python (distributed/data/README.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.hpp"

namespace dflash {

struct FeatureShardContents {
  std::int64_t hidden_size = 0;
  std::vector<std::int64_t> target_layer_ids;
  std::string target_model;              // written when not empty
  std::vector<std::int64_t> offsets{0};  // [n+1]
  std::vector<std::int64_t> tokens;      // [rows]
  std::vector<std::int64_t> loss_mask;   // [rows], 0 or 1
  std::vector<double> target_features;   // [rows, K H]
  std::vector<double> teacher_hidden;    // [rows, H]

  // Appends one sequence of `tokens.size()` rows.
  void append(const std::vector<std::int64_t>& tokens, const std::vector<std::int64_t>& loss_mask,
              const std::vector<double>& features, const std::vector<double>& teacher);
};

// The safetensors writer holding the shard (tokens I32, loss_mask U8, floats as `float_dtype`).
safetensors::Writer feature_shard_writer(const FeatureShardContents& shard, safetensors::Dtype float_dtype);

void write_feature_shard(const std::filesystem::path& path, const FeatureShardContents& shard,
                         safetensors::Dtype float_dtype);

}  // namespace dflash
