// A Hugging Face safetensors checkpoint, single-file or sharded, read tensor by tensor.
//
// Sharded: `model.safetensors.index.json` = {"metadata": {...}, "weight_map": {tensor name:
// shard file name}} next to the shard files. Opening validates everything up front: the index is
// strict JSON, every shard name is a plain file name inside the index's directory (no "../x", no
// absolute paths), every shard exists and has a valid header, and every mapped tensor is in its
// shard. Tensor bytes are read only when asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors_reader.hpp"

namespace dflash {

inline constexpr std::string_view kHfIndexFileName = "model.safetensors.index.json";
inline constexpr std::string_view kHfSingleFileName = "model.safetensors";

class HfCheckpoint {
 public:
  // `path` is a directory (its model.safetensors.index.json if present, else its
  // model.safetensors), an index file (*.json), or a single safetensors file. Throws
  // dflash::InputError naming the file and the problem.
  static HfCheckpoint open(const std::filesystem::path& path);
  static HfCheckpoint open_index(const std::filesystem::path& index_path);
  static HfCheckpoint open_single_file(const std::filesystem::path& path);

  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(std::string_view name) const;
  // Throw dflash::InputError if there is no tensor `name`.
  const safetensors::TensorInfo& info(std::string_view name) const;
  safetensors::TensorData tensor(std::string_view name) const;
  std::vector<double> doubles(std::string_view name) const;
  // Elements [first, first + out.size()) of a float tensor (safetensors::Reader::read_float_elements).
  void read_float_elements(std::string_view name, std::uint64_t first, std::span<double> out) const;
  // The file name (relative to the checkpoint directory) that holds `name`.
  std::string shard_of(std::string_view name) const;

  // The index's "metadata" object (e.g. {"total_size": ...}); an empty object for a single file.
  const nlohmann::json& index_metadata() const { return index_metadata_; }

 private:
  HfCheckpoint() = default;
  const safetensors::Reader& reader_for(std::string_view name) const;

  std::string source_;                                        // index or file path, for messages
  std::vector<std::string> shard_names_;                      // file names, sorted
  std::vector<safetensors::Reader> shards_;                   // parallel to shard_names_
  std::map<std::string, std::size_t, std::less<>> shard_of_;  // tensor name -> index in shards_
  nlohmann::json index_metadata_ = nlohmann::json::object();
};

// Whether `name` is a plain file name: not empty, not "." or "..", no '/', '\\' or NUL, so it
// cannot name anything outside the directory it is resolved in.
bool is_plain_file_name(std::string_view name);

}  // namespace dflash
