#include "io/strict_json.hpp"

#include <string>
#include <utility>
#include <vector>

#include "io/errors.hpp"

namespace dflash::safetensors {

namespace {

using json = nlohmann::json;

// A SAX consumer that builds the DOM itself, so that it sees every key of every object (and so
// can refuse duplicates) and every container opening (and so can bound the depth). On the first
// problem it records a message and returns false, which stops the parser.
class StrictJsonBuilder {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit StrictJsonBuilder(std::size_t max_depth) : max_depth_(max_depth) {}

  bool null() { return add_value(json(nullptr)); }
  bool boolean(bool value) { return add_value(json(value)); }
  bool number_integer(number_integer_t value) { return add_value(json(value)); }
  bool number_unsigned(number_unsigned_t value) { return add_value(json(value)); }
  bool number_float(number_float_t value, const string_t& /*text*/) { return add_value(json(value)); }
  bool string(string_t& value) { return add_value(json(std::move(value))); }
  bool binary(binary_t& /*value*/) { return fail("binary values are not JSON"); }

  bool start_object(std::size_t /*size*/) { return open_container(json::object()); }
  bool start_array(std::size_t /*size*/) { return open_container(json::array()); }
  bool end_object() { return close_container(); }
  bool end_array() { return close_container(); }

  bool key(string_t& name) {
    json& object = *open_.back();
    if (object.contains(name)) {
      // Every earlier key of this object already has its value in place (values are inserted as
      // soon as they start), so a repeat is visible here.
      return fail("duplicate key " + clipped_quote(name));
    }
    pending_key_ = std::move(name);
    return true;
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const json::exception& error) {
    // nlohmann's message already says where and what; drop its "[json.exception...] " tag.
    std::string message = error.what();
    const std::size_t tag_end = message.find("] ");
    if (message.starts_with("[json.exception") && tag_end != std::string::npos) message.erase(0, tag_end + 2);
    return fail("invalid JSON: " + message);
  }

  const std::string& error() const { return error_; }
  json take_result() { return std::move(root_); }

 private:
  // Places `value` where the parser is: the root, the next array element, or the pending key.
  json* place(json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    json& slot = parent[pending_key_];
    slot = std::move(value);
    return &slot;
  }

  bool add_value(json value) {
    place(std::move(value));
    return true;
  }

  bool open_container(json container) {
    if (open_.size() + 1 > max_depth_) {
      return fail("JSON nested deeper than " + std::to_string(max_depth_) + " levels");
    }
    // Pointers into the parent stay valid: nothing else is added to the parent while this
    // container is open.
    open_.push_back(place(std::move(container)));
    return true;
  }

  bool close_container() {
    open_.pop_back();
    return true;
  }

  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  std::size_t max_depth_;
  json root_;
  std::vector<json*> open_;
  std::string pending_key_;
  std::string error_;
};

}  // namespace

std::optional<std::size_t> first_invalid_utf8_offset(std::string_view text) {
  const auto byte_at = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  std::size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = byte_at(i);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // Length and the allowed range of the second byte (which excludes overlong forms,
    // surrogates U+D800..DFFF and code points above U+10FFFF), per RFC 3629.
    std::size_t length;
    unsigned char second_min = 0x80;
    unsigned char second_max = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) second_min = 0xA0;
      if (lead == 0xED) second_max = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) second_min = 0x90;
      if (lead == 0xF4) second_max = 0x8F;
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    if (byte_at(i + 1) < second_min || byte_at(i + 1) > second_max) return i;
    for (std::size_t k = 2; k < length; ++k) {
      if (byte_at(i + k) < 0x80 || byte_at(i + k) > 0xBF) return i;
    }
    i += length;
  }
  return std::nullopt;
}

json parse_strict_json(std::string_view text, std::string_view source, std::size_t max_depth) {
  if (const auto bad = first_invalid_utf8_offset(text)) {
    throw InputError(str(source, ": not valid UTF-8 (byte 0x", std::hex,
                         static_cast<unsigned>(static_cast<unsigned char>(text[*bad])), std::dec, " at offset ", *bad,
                         ")"));
  }
  StrictJsonBuilder builder(max_depth);
  bool ok = false;
  try {
    ok = json::sax_parse(text.data(), text.data() + text.size(), &builder, json::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& error) {
    // The SAX path reports syntax errors through parse_error; anything else nlohmann throws is
    // still a property of the input.
    throw InputError(str(source, ": invalid JSON: ", error.what()));
  }
  if (!ok) throw InputError(str(source, ": ", builder.error()));
  return builder.take_result();
}

std::string clipped_quote(std::string_view text) {
  constexpr std::size_t kMaxQuoted = 200;
  if (text.size() <= kMaxQuoted) return str("'", text, "'");
  std::size_t cut = kMaxQuoted;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0u) == 0x80u) --cut;  // not mid-character
  return str("'", text.substr(0, cut), "'... (", text.size(), " bytes)");
}

std::string_view json_kind(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a non-integer number";
    default:
      return "a non-JSON value";
  }
}

}  // namespace dflash::safetensors
