// A small, valid run checkpoint (distributed/checkpoint/save_restore.hpp) for the fuzz targets of
// the checkpoint readers: written once per process by the writer `train` uses, into the fuzz
// scratch directory, so that a target changes one file of it per input. The drafter is a small
// one (H 4, one layer, V 8: 132 parameters; model.safetensors is 1,752 bytes, optimizer.safetensors
// 3,704), so that a whole tensor file fits in libFuzzer's input length.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "distributed/checkpoint/save_restore.hpp"
#include "fuzz/scratch_dir.hpp"
#include "io/safetensors_dtype.hpp"
#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash::fuzz {

inline const DrafterConfig& tiny_checkpoint_config() {
  static const DrafterConfig config = drafter_config_from_json(nlohmann::json::parse(R"({
    "hidden_size": 4, "intermediate_size": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 2, "num_hidden_layers": 1, "vocab_size": 8, "block_size": 2, "mask_token_id": 7,
    "target_layer_ids": [1], "max_anchors": 2, "loss_chunk_rows": 2})"),
                                                               "tiny checkpoint config");
  return config;
}

// <scratch>/run/step-00000001/, written on the first call: F32 values (the CUDA backend's
// precision, so the files are half the size), step 1, cursor (0, 3), seed 7, 12 tokens seen.
inline const std::filesystem::path& tiny_checkpoint_dir() {
  static const std::filesystem::path dir = [] {
    const DrafterConfig& config = tiny_checkpoint_config();
    const auto n = static_cast<std::size_t>(drafter_parameter_count(config));
    RunCheckpoint c;
    c.step = 1;
    c.data_cursor = {0, 3};
    c.seed = 7;
    c.tokens_seen = 12;
    c.config = drafter_config_to_json(config);
    for (std::size_t i = 0; i < n; ++i) {
      c.master.push_back(0.25 + 0.001 * static_cast<double>(i));
      c.exp_avg.push_back(0.0);
      c.exp_avg_sq.push_back(1e-6);
    }
    return write_run_checkpoint(scratch_dir() / "run", config, c,
                                CheckpointWriteOptions{.precision = safetensors::Dtype::F32});
  }();
  return dir;
}

}  // namespace dflash::fuzz
