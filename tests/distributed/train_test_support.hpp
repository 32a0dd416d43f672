// Shared by the tests of `dflash train`'s parts: the tiny training config, scratch directories and
// small valid feature shards to break one way at a time.
#pragma once

#include <fstream>
#include <iterator>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "distributed/data/feature_shard_writer.hpp"
#include "distributed/data/synthetic_set.hpp"
#include "reference/counter_rng.hpp"
#include "reference/drafter_config.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash::train_testing {

using safetensors::testing::input_error_message;
using safetensors::testing::read_whole_file;
using safetensors::testing::ScratchDirectory;
using safetensors::testing::write_whole_file;

// configs/tiny-train.json: the tiny drafter with the TRAINING §12 fields (6 sequences a step).
inline std::filesystem::path tiny_train_config_path() {
  return std::filesystem::path(DFLASH_SOURCE_DIR) / "configs" / "tiny-train.json";
}
inline DrafterConfig tiny_config() { return load_drafter_config(tiny_train_config_path()); }
// tiny_config() with the depth of the target `data synth` writes for it (num_target_layers), as a
// run on that target records it: what an export needs.
inline DrafterConfig tiny_export_config() {
  DrafterConfig c = tiny_config();
  c.num_target_layers = synthetic_target_depth(c);
  return c;
}

// A file's bytes as a string ("" when it cannot be opened).
inline std::string file_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// `sequences` valid sequences of lengths 3, 4, 5, ... with random tokens, mask and values.
inline FeatureShardContents valid_shard(const DrafterConfig& c, std::int64_t sequences, std::uint64_t seed) {
  FeatureShardContents s;
  s.hidden_size = c.hidden_size;
  s.target_layer_ids = c.target_layer_ids;
  CounterRng rng(seed, 7);
  for (std::int64_t q = 0; q < sequences; ++q) {
    const std::int64_t S = 3 + q;
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(S)), mask(static_cast<std::size_t>(S));
    std::vector<double> f(static_cast<std::size_t>(S * c.feature_width())),
        g(static_cast<std::size_t>(S * c.hidden_size));
    for (auto& t : tokens) t = rng.below(c.vocab_size);
    for (auto& m : mask) m = rng.bernoulli(0.2) ? 0 : 1;
    for (auto& v : f) v = rng.uniform(-1, 1);
    for (auto& v : g) v = rng.uniform(-1, 1);
    s.append(tokens, mask, f, g);
  }
  return s;
}

}  // namespace dflash::train_testing
