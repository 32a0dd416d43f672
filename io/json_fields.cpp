#include "io/json_fields.hpp"

#include "io/errors.hpp"
#include "io/file_read.hpp"
#include "io/strict_json.hpp"

namespace dflash {

nlohmann::json read_json_file(const std::filesystem::path& path, std::uint64_t max_bytes, std::string_view what) {
  std::string text;
  try {
    text = read_regular_file(path, max_bytes);
  } catch (const InputError& e) {
    // "invalid <path>: <problem>" becomes "invalid config file <path>: <problem>".
    const std::string_view message = e.what(), prefix = "invalid ";
    throw InputError(str(prefix, what, " ", message.substr(message.starts_with(prefix) ? prefix.size() : 0)));
  }
  return safetensors::parse_strict_json(text, path.string(), kMaxConfigJsonDepth);
}

std::string config_field_name(std::string_view source, std::string_view key) {
  return source.empty() ? std::string(key) : str(key, " in ", source);
}

JsonFields::JsonFields(const nlohmann::json& json, std::string_view source) : json_(json), source_(source) {
  if (!json_.is_object()) throw_input_error(source_, "the config is not a JSON object");
}

std::int64_t JsonFields::integer(std::string_view key) const {
  const auto it = json_.find(key);
  if (it == json_.end()) throw_input_error(name(key), "is missing");
  if (!it->is_number_integer()) throw_input_error(name(key), str(it->dump(), " is not an integer"));
  return it->get<std::int64_t>();
}

std::int64_t JsonFields::integer_or(std::string_view key, std::int64_t fallback) const {
  return json_.contains(key) && !json_.at(key).is_null() ? integer(key) : fallback;
}

double JsonFields::number_or(std::string_view key, double fallback) const {
  const auto it = json_.find(key);
  if (it == json_.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw_input_error(name(key), str(it->dump(), " is not a number"));
  return it->get<double>();
}

bool JsonFields::boolean_or(std::string_view key, bool fallback) const {
  const auto it = json_.find(key);
  if (it == json_.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw_input_error(name(key), str(it->dump(), " is not true or false"));
  return it->get<bool>();
}

}  // namespace dflash
