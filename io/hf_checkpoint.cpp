#include "io/hf_checkpoint.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <system_error>

#include "io/errors.hpp"
#include "io/file_limits.hpp"
#include "io/file_read.hpp"
#include "io/strict_json.hpp"

namespace dflash {

namespace {

using json = nlohmann::json;

// Root (1) > metadata / weight_map (2) > a metadata value that is itself a container (3).
constexpr std::size_t kMaxIndexJsonDepth = 3;

}  // namespace

bool is_plain_file_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  return name.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos;
}

HfCheckpoint HfCheckpoint::open(const std::filesystem::path& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    const std::filesystem::path index = path / kHfIndexFileName;
    if (std::filesystem::exists(index, error)) return open_index(index);
    const std::filesystem::path single = path / kHfSingleFileName;
    if (std::filesystem::exists(single, error)) return open_single_file(single);
    throw InputError(str(path.string(), ": directory has neither ", kHfIndexFileName, " nor ", kHfSingleFileName));
  }
  if (path.extension() == ".json") return open_index(path);
  return open_single_file(path);
}

HfCheckpoint HfCheckpoint::open_single_file(const std::filesystem::path& path) {
  HfCheckpoint checkpoint;
  checkpoint.source_ = path.string();
  checkpoint.shard_names_.push_back(path.filename().string());
  checkpoint.shards_.push_back(safetensors::Reader::open_file(path));
  for (const std::string& name : checkpoint.shards_.front().names()) checkpoint.shard_of_.emplace(name, 0);
  return checkpoint;
}

HfCheckpoint HfCheckpoint::open_index(const std::filesystem::path& index_path) {
  HfCheckpoint checkpoint;
  const std::string source = index_path.string();
  checkpoint.source_ = source;
  const json index =
      safetensors::parse_strict_json(read_regular_file(index_path, kMaxIndexFileBytes), source, kMaxIndexJsonDepth);
  if (!index.is_object()) throw InputError(str(source, ": is ", safetensors::json_kind(index), ", not a JSON object"));
  // Other top-level keys are ignored: tools add their own, and nothing here depends on them.
  if (const auto metadata = index.find("metadata"); metadata != index.end()) {
    if (!metadata->is_object()) {
      throw InputError(str(source, ": \"metadata\" is ", safetensors::json_kind(*metadata), ", not an object"));
    }
    checkpoint.index_metadata_ = *metadata;
  }
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end()) throw InputError(str(source, ": missing \"weight_map\""));
  if (!weight_map->is_object()) {
    throw InputError(str(source, ": \"weight_map\" is ", safetensors::json_kind(*weight_map), ", not an object"));
  }
  if (weight_map->empty()) throw InputError(str(source, ": \"weight_map\" maps no tensors"));

  // Shard names first: all checked before any file is touched.
  const std::filesystem::path directory = index_path.has_parent_path() ? index_path.parent_path() : ".";
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string()) {
      throw InputError(str(source, ": weight_map entry ", safetensors::clipped_quote(tensor), " is ",
                           safetensors::json_kind(shard), ", not a shard file name"));
    }
    const auto& shard_name = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(shard_name)) {
      throw InputError(str(source, ": shard ", safetensors::clipped_quote(shard_name), " of tensor ",
                           safetensors::clipped_quote(tensor), " is not a plain file name in ", directory.string(),
                           " (no directories, no '..')"));
    }
    shard_names.insert(shard_name);
  }
  for (const std::string& shard_name : shard_names) {
    const std::filesystem::path shard_path = directory / shard_name;
    std::error_code error;
    if (!std::filesystem::is_regular_file(shard_path, error)) {
      throw InputError(
          str(source, ": shard ", safetensors::clipped_quote(shard_name), " does not exist in ", directory.string()));
    }
    checkpoint.shard_names_.push_back(shard_name);
    checkpoint.shards_.push_back(safetensors::Reader::open_file(shard_path));
  }
  for (const auto& [tensor, shard] : weight_map->items()) {
    const auto& shard_name = shard.get_ref<const std::string&>();
    const auto position = std::lower_bound(checkpoint.shard_names_.begin(), checkpoint.shard_names_.end(), shard_name);
    const auto shard_index = static_cast<std::size_t>(position - checkpoint.shard_names_.begin());
    if (!checkpoint.shards_[shard_index].contains(tensor)) {
      throw InputError(str(source, ": tensor ", safetensors::clipped_quote(tensor), " is mapped to shard ",
                           safetensors::clipped_quote(shard_name), " but that shard has no tensor named ",
                           safetensors::clipped_quote(tensor)));
    }
    checkpoint.shard_of_.emplace(tensor, shard_index);
  }
  return checkpoint;
}

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> names;
  names.reserve(shard_of_.size());
  for (const auto& [name, shard] : shard_of_) names.push_back(name);
  return names;
}

bool HfCheckpoint::contains(std::string_view name) const { return shard_of_.find(name) != shard_of_.end(); }

const safetensors::Reader& HfCheckpoint::reader_for(std::string_view name) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) throw InputError(str(source_, ": no tensor named ", safetensors::clipped_quote(name)));
  return shards_[it->second];
}

const safetensors::TensorInfo& HfCheckpoint::info(std::string_view name) const { return reader_for(name).info(name); }

safetensors::TensorData HfCheckpoint::tensor(std::string_view name) const { return reader_for(name).tensor(name); }

std::vector<double> HfCheckpoint::doubles(std::string_view name) const { return reader_for(name).doubles(name); }

void HfCheckpoint::read_float_elements(std::string_view name, std::uint64_t first, std::span<double> out) const {
  reader_for(name).read_float_elements(name, first, out);
}

std::string HfCheckpoint::shard_of(std::string_view name) const {
  reader_for(name);  // throws for an unknown name
  return shard_names_[shard_of_.find(name)->second];
}

}  // namespace dflash
