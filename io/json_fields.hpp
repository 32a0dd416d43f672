// Typed reads of a config's JSON fields, with errors that name the file and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "io/file_limits.hpp"

namespace dflash {

// A JSON file the run reads (configs, trainer_state.json): a regular file of at most `max_bytes`
// (io/file_read.hpp), strict JSON (io/strict_json.hpp: a key given twice in one object is refused,
// naming it, instead of the last one silently winning). Throws InputError naming `what` and the path.
nlohmann::json read_json_file(const std::filesystem::path& path, std::uint64_t max_bytes = kMaxConfigFileBytes,
                              std::string_view what = "config file");

// "<key> in <source>": how errors about a config field name it (as reference/drafter_config does).
std::string config_field_name(std::string_view source, std::string_view key);

class JsonFields {
 public:
  // Throws InputError unless `json` is an object.
  JsonFields(const nlohmann::json& json, std::string_view source);

  std::int64_t integer(std::string_view key) const;  // required, an integer
  std::int64_t integer_or(std::string_view key, std::int64_t fallback) const;
  double number_or(std::string_view key, double fallback) const;  // any JSON number
  bool boolean_or(std::string_view key, bool fallback) const;
  std::string name(std::string_view key) const { return config_field_name(source_, key); }

 private:
  const nlohmann::json& json_;
  std::string source_;
};

}  // namespace dflash
