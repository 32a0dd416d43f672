// Strict JSON for untrusted headers and index files: valid UTF-8, no duplicate keys in any
// object, bounded nesting.
//
// Why not plain nlohmann::json::parse: it silently keeps one of two duplicate keys, so a file
// could mean different things to different readers (the Python package rejects duplicates), and
// its nesting depth is bounded only by memory.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace dflash::safetensors {

// Byte offset of the first byte that is not part of well-formed UTF-8 (overlong forms,
// surrogates and code points above U+10FFFF are ill-formed), or nothing if `text` is valid.
std::optional<std::size_t> first_invalid_utf8_offset(std::string_view text);

// Parses `text` as one JSON value. Throws dflash::InputError "<source>: <problem>" for invalid
// UTF-8, a syntax error, a key repeated within one object, or containers nested deeper than
// `max_depth` (the top-level value is depth 1).
nlohmann::json parse_strict_json(std::string_view text, std::string_view source, std::size_t max_depth);

// `text` in single quotes for an error message, cut short (at a character boundary) if it is
// long: names and strings in a hostile file can be up to 100 MB.
std::string clipped_quote(std::string_view text);

// "a string", "an array", ...: the JSON kind of `value`, for error messages.
std::string_view json_kind(const nlohmann::json& value);

}  // namespace dflash::safetensors
