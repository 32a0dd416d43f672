// Every malformed-shard case of TRAINING §14, each as a change to a valid shard, with what its
// error must name (the tensor or metadata key, and the index). Used by the reader's tests and by
// the run's (refused before anything is written).
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/data/feature_shard_writer.hpp"
#include "io/safetensors.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash::train_testing {

// A shard as plain tensors and metadata, to break before writing.
struct RawShard {
  struct Entry {
    safetensors::Dtype dtype;
    safetensors::Shape shape;
    std::vector<double> values;
  };
  std::map<std::string, std::string> metadata;
  std::map<std::string, Entry> tensors;

  explicit RawShard(const FeatureShardContents& s) {
    using safetensors::Dtype;
    const auto rows = std::int64_t(s.tokens.size()), H = s.hidden_size;
    const auto KH = std::int64_t(s.target_layer_ids.size()) * H;
    metadata = {{"format", "dflash-features"},
                {"version", "1"},
                {"hidden_size", std::to_string(H)},
                {"target_layer_ids", nlohmann::json(s.target_layer_ids).dump()},
                {"num_sequences", std::to_string(s.offsets.size() - 1)}};
    tensors["offsets"] = {Dtype::I64, {std::int64_t(s.offsets.size())}, {s.offsets.begin(), s.offsets.end()}};
    tensors["tokens"] = {Dtype::I64, {rows}, {s.tokens.begin(), s.tokens.end()}};
    tensors["loss_mask"] = {Dtype::U8, {rows}, {s.loss_mask.begin(), s.loss_mask.end()}};
    tensors["target_features"] = {Dtype::F32, {rows, KH}, s.target_features};
    tensors["teacher_hidden"] = {Dtype::F32, {rows, H}, s.teacher_hidden};
  }

  void write(const std::filesystem::path& path) const {
    safetensors::Writer w;
    for (const auto& [k, v] : metadata) w.set_metadata(k, v);
    for (const auto& [name, e] : tensors) {
      if (safetensors::dtype_is_float(e.dtype)) {
        w.add_floats(name, e.dtype, e.shape, e.values);
      } else {
        std::vector<std::int64_t> ints(e.values.begin(), e.values.end());
        w.add_integers(name, e.dtype, e.shape, ints);
      }
    }
    w.write_file(path);
  }
};

struct MalformedShardCase {
  std::string name;
  std::function<void(RawShard&)> damage;
  std::vector<std::string> named;  // substrings the error must contain (besides the file)
};

inline void PrintTo(const MalformedShardCase& c, std::ostream* os) { *os << c.name; }

// The shard damaged is valid_shard(config, 4 sequences): rows 3 + 4 + 5 + 6 = 18, vocab 64, H 16, K 2.
inline std::vector<MalformedShardCase> malformed_shard_cases() {
  using safetensors::Dtype;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<MalformedShardCase> cases;
  for (const char* t : {"offsets", "tokens", "loss_mask", "target_features", "teacher_hidden"}) {
    cases.push_back({std::string("missing_") + t,
                     [t](RawShard& s) { s.tensors.erase(t); },
                     {std::string("'") + t + "'", "missing"}});
  }
  cases.push_back(
      {"tokens_dtype_f32", [](RawShard& s) { s.tensors.at("tokens").dtype = Dtype::F32; }, {"'tokens'", "dtype F32"}});
  cases.push_back({"features_dtype_f64",
                   [](RawShard& s) { s.tensors.at("target_features").dtype = Dtype::F64; },
                   {"'target_features'", "dtype F64"}});
  cases.push_back({"loss_mask_dtype_i32",
                   [](RawShard& s) { s.tensors.at("loss_mask").dtype = Dtype::I32; },
                   {"'loss_mask'", "dtype I32"}});
  cases.push_back({"tokens_shape",
                   [](RawShard& s) {
                     auto& t = s.tensors.at("tokens");
                     t.shape = {t.shape[0] - 1};
                     t.values.pop_back();
                   },
                   {"'tokens'", "shape [17]"}});
  cases.push_back({"num_sequences_disagrees",
                   [](RawShard& s) { s.metadata["num_sequences"] = "5"; },
                   {"'offsets'", "shape [5]", "[6]"}});
  cases.push_back({"offsets_not_from_zero",
                   [](RawShard& s) { s.tensors.at("offsets").values[0] = 1; },
                   {"'offsets'[0]", "is not 0"}});
  cases.push_back({"offsets_not_increasing",
                   [](RawShard& s) { s.tensors.at("offsets").values[2] = s.tensors.at("offsets").values[1]; },
                   {"'offsets'[2]", "not greater"}});
  cases.push_back({"token_at_vocab",
                   [](RawShard& s) { s.tensors.at("tokens").values[5] = 64; },
                   {"'tokens'[5]", "64", "vocab_size = 64"}});
  cases.push_back(
      {"token_negative", [](RawShard& s) { s.tensors.at("tokens").values[7] = -1; }, {"'tokens'[7]", "-1"}});
  cases.push_back({"loss_mask_two",
                   [](RawShard& s) { s.tensors.at("loss_mask").values[3] = 2; },
                   {"'loss_mask'[3]", "not 0 or 1"}});
  cases.push_back({"feature_width_not_KH",
                   [](RawShard& s) {
                     auto& t = s.tensors.at("target_features");
                     t.shape[1] += 16;
                     t.values.resize(std::size_t(t.shape[0] * t.shape[1]), 0.0);
                   },
                   {"'target_features'", "shape [18, 48]", "[18, 32]"}});
  cases.push_back({"teacher_width_not_H",
                   [](RawShard& s) {
                     auto& t = s.tensors.at("teacher_hidden");
                     t.shape[1] = 8;
                     t.values.resize(std::size_t(t.shape[0] * 8));
                   },
                   {"'teacher_hidden'", "shape [18, 8]", "[18, 16]"}});
  cases.push_back({"metadata_hidden_size",
                   [](RawShard& s) { s.metadata["hidden_size"] = "32"; },
                   {"__metadata__.hidden_size", "32"}});
  cases.push_back({"metadata_target_layer_ids",
                   [](RawShard& s) { s.metadata["target_layer_ids"] = "[1, 2]"; },
                   {"__metadata__.target_layer_ids", "[1, 2]", "[1,3]"}});
  // Class 10 of issue 22: not JSON at all was accepted (a failed parse compared with !=).
  cases.push_back({"metadata_target_layer_ids_not_json",
                   [](RawShard& s) { s.metadata["target_layer_ids"] = "[1, 3"; },
                   {"__metadata__.target_layer_ids", "'[1, 3'", "is not a JSON list"}});
  cases.push_back(
      {"metadata_format", [](RawShard& s) { s.metadata["format"] = "pt"; }, {"__metadata__.format", "'pt'"}});
  cases.push_back(
      {"metadata_version", [](RawShard& s) { s.metadata["version"] = "2"; }, {"__metadata__.version", "'2'"}});
  cases.push_back({"metadata_missing",
                   [](RawShard& s) { s.metadata.erase("num_sequences"); },
                   {"__metadata__.num_sequences", "missing"}});
  cases.push_back({"feature_nan",
                   [nan](RawShard& s) { s.tensors.at("target_features").values[4 * 32 + 3] = nan; },
                   {"'target_features'[4][3]", "not finite"}});
  cases.push_back({"teacher_inf",
                   [inf](RawShard& s) { s.tensors.at("teacher_hidden").values[9 * 16 + 15] = -inf; },
                   {"'teacher_hidden'[9][15]", "not finite"}});
  // The last sequence's offset and the last row: a check whose loop stops one short passes these.
  cases.push_back({"offsets_last_not_increasing",
                   [](RawShard& s) { s.tensors.at("offsets").values.at(4) = s.tensors.at("offsets").values.at(3); },
                   {"'offsets'[4]", "not greater"}});
  cases.push_back({"token_last_row_at_vocab",
                   [](RawShard& s) { s.tensors.at("tokens").values.at(17) = 64; },
                   {"'tokens'[17]", "64", "vocab_size = 64"}});
  cases.push_back({"loss_mask_last_row_two",
                   [](RawShard& s) { s.tensors.at("loss_mask").values.at(17) = 2; },
                   {"'loss_mask'[17]", "not 0 or 1"}});
  cases.push_back({"feature_last_row_nan",
                   [nan](RawShard& s) { s.tensors.at("target_features").values.at(17 * 32 + 31) = nan; },
                   {"'target_features'[17][31]", "not finite"}});
  cases.push_back({"teacher_last_row_inf",
                   [inf](RawShard& s) { s.tensors.at("teacher_hidden").values.at(17 * 16 + 15) = inf; },
                   {"'teacher_hidden'[17][15]", "not finite"}});
  return cases;
}

// A set of two shards in `dir` for the run's tests: a.safetensors valid (6 sequences of tiny_config's
// shape) and b.safetensors (4 sequences) changed by `damage`, so shard 1 of 2 is the bad one.
inline void write_set_with_damaged_shard(const std::filesystem::path& dir,
                                         const std::function<void(RawShard&)>& damage) {
  const DrafterConfig c = tiny_config();
  std::filesystem::create_directories(dir);
  write_feature_shard(dir / "a.safetensors", valid_shard(c, 6, 1), safetensors::Dtype::BF16);
  RawShard raw(valid_shard(c, 4, 9));
  damage(raw);
  raw.write(dir / "b.safetensors");
}

}  // namespace dflash::train_testing
