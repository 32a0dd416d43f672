#include "io/json_fields.hpp"

#include <fstream>
#include <sstream>

#include "io/errors.hpp"

namespace dflash {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw_input_error("config file", str("'", path.string(), "' cannot be opened"));
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number beyond a double
    throw_input_error("config file", str("'", path.string(), "' is not valid JSON: ", e.what()));
  }
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
