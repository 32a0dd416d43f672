#include "io/safetensors_header.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <vector>

#include "io/errors.hpp"
#include "io/strict_json.hpp"

namespace dflash::safetensors {

namespace {

using json = nlohmann::json;

// Root object (1) > tensor entry or __metadata__ (2) > shape or data_offsets (3). One level of
// slack so that a wrongly nested field is reported by name ("shape dimension 0 is an array")
// rather than as a depth violation.
constexpr std::size_t kMaxHeaderJsonDepth = 4;

constexpr std::array<std::string_view, 3> kEntryFields = {"dtype", "shape", "data_offsets"};

// A short description of an offending JSON value: numbers are printed, anything that could be
// long (strings, containers) is only named by kind.
std::string describe(const json& value) {
  if (value.is_number() || value.is_boolean() || value.is_null()) return value.dump();
  return std::string(json_kind(value));
}

[[noreturn]] void reject_tensor(std::string_view source, std::string_view name, std::string_view problem) {
  throw InputError(str(source, ": tensor ", clipped_quote(name), " ", problem));
}

// A JSON value as a non-negative integer within `limit`, or nothing.
std::optional<std::uint64_t> non_negative_integer(const json& value, std::uint64_t limit) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<std::uint64_t>();
    if (v <= limit) return v;
    return std::nullopt;
  }
  if (value.is_number_integer()) {
    const auto v = value.get<std::int64_t>();
    if (v >= 0 && static_cast<std::uint64_t>(v) <= limit) return static_cast<std::uint64_t>(v);
  }
  return std::nullopt;
}

const json& required_field(std::string_view source, std::string_view name, const json& entry, std::string_view field) {
  const auto it = entry.find(field);
  if (it == entry.end()) reject_tensor(source, name, str("is missing field '", field, "'"));
  return *it;
}

Dtype parse_dtype(std::string_view source, std::string_view name, const json& value) {
  if (!value.is_string()) reject_tensor(source, name, str("field 'dtype' is ", describe(value), ", not a string"));
  const auto& text = value.get_ref<const std::string&>();
  const auto dtype = dtype_from_name(text);
  if (!dtype) {
    reject_tensor(source, name,
                  str("has unsupported dtype ", clipped_quote(text), " (supported: ", supported_dtype_names(), ")"));
  }
  return *dtype;
}

Shape parse_shape(std::string_view source, std::string_view name, const json& value) {
  if (!value.is_array()) reject_tensor(source, name, str("field 'shape' is ", describe(value), ", not an array"));
  Shape shape;
  shape.reserve(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    const auto dim =
        non_negative_integer(value[i], static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
    if (!dim) {
      reject_tensor(source, name,
                    str("shape dimension ", i, " is ", describe(value[i]), ", not a non-negative integer"));
    }
    shape.push_back(static_cast<std::int64_t>(*dim));
  }
  return shape;
}

std::array<std::uint64_t, 2> parse_offsets(std::string_view source, std::string_view name, const json& value) {
  if (!value.is_array() || value.size() != 2) {
    const std::string got = value.is_array() ? str("an array of ", value.size()) : describe(value);
    reject_tensor(source, name, str("field 'data_offsets' is ", got, ", not an array of 2 integers"));
  }
  std::array<std::uint64_t, 2> offsets{};
  for (std::size_t i = 0; i < 2; ++i) {
    const auto offset = non_negative_integer(value[i], std::numeric_limits<std::uint64_t>::max());
    if (!offset) {
      reject_tensor(source, name, str("data_offsets[", i, "] is ", describe(value[i]), ", not a non-negative integer"));
    }
    offsets[i] = *offset;
  }
  return offsets;
}

TensorInfo parse_tensor_entry(std::string_view source, const std::string& name, const json& entry,
                              std::uint64_t data_size) {
  if (!entry.is_object()) reject_tensor(source, name, str("entry is ", describe(entry), ", not an object"));
  for (const auto& [field, unused] : entry.items()) {
    if (std::find(kEntryFields.begin(), kEntryFields.end(), field) == kEntryFields.end()) {
      reject_tensor(source, name,
                    str("has unknown field ", clipped_quote(field), " (expected dtype, shape, data_offsets)"));
    }
  }
  TensorInfo info;
  info.name = name;
  info.dtype = parse_dtype(source, name, required_field(source, name, entry, "dtype"));
  info.shape = parse_shape(source, name, required_field(source, name, entry, "shape"));
  const auto [begin, end] = parse_offsets(source, name, required_field(source, name, entry, "data_offsets"));
  info.begin = begin;
  info.end = end;

  const std::size_t element_size = dtype_size(info.dtype);
  const auto count = checked_element_count(info.shape, element_size);
  if (!count) {
    reject_tensor(source, name,
                  str("shape ", format_shape(info.shape), " × ", element_size, "-byte elements overflows 64 bits"));
  }
  const std::string range = str("data_offsets [", begin, ", ", end, "]");
  if (begin > end) reject_tensor(source, name, str(range, ": begin is after end"));
  if (end > data_size) {
    reject_tensor(source, name, str(range, " reach beyond the end of the ", data_size, "-byte data section"));
  }
  const std::uint64_t needed = *count * element_size;
  if (end - begin != needed) {
    reject_tensor(source, name,
                  str(range, " hold ", end - begin, " bytes but dtype ", dtype_name(info.dtype), " × shape ",
                      format_shape(info.shape), " needs ", needed));
  }
  return info;
}

Metadata parse_metadata(std::string_view source, const json& value) {
  if (!value.is_object()) {
    throw InputError(str(source, ": ", kMetadataKey, " is ", describe(value), ", not an object of strings"));
  }
  Metadata metadata;
  for (const auto& [key, entry] : value.items()) {
    if (!entry.is_string()) {
      throw InputError(
          str(source, ": ", kMetadataKey, " entry ", clipped_quote(key), " is ", describe(entry), ", not a string"));
    }
    metadata.emplace(key, entry.get<std::string>());
  }
  return metadata;
}

// The tensors' ranges, in file order, must cover [0, data_size) exactly once. Empty tensors
// ([k, k]) take no room; they only have to sit at a boundary.
void check_ranges_tile_data(std::string_view source, const Layout& layout) {
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(layout.tensors.size());
  for (const auto& [name, info] : layout.tensors) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    if (a->begin != b->begin) return a->begin < b->begin;
    if (a->end != b->end) return a->end < b->end;
    return a->name < b->name;
  });
  std::uint64_t covered = 0;  // every byte below this belongs to exactly one tensor
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* info : by_offset) {
    if (info->begin < covered) {
      throw InputError(str(source, ": tensor ", clipped_quote(info->name), " data_offsets [", info->begin, ", ",
                           info->end, "] overlap tensor ", clipped_quote(previous->name), " [", previous->begin, ", ",
                           previous->end, "]"));
    }
    if (info->begin > covered) {
      throw InputError(str(source, ": hole in the data section: bytes [", covered, ", ", info->begin,
                           ") before tensor ", clipped_quote(info->name), " belong to no tensor"));
    }
    covered = info->end;
    previous = info;
  }
  if (covered != layout.data_size) {
    throw InputError(str(source, ": trailing bytes: the data section holds ", layout.data_size,
                         " bytes but the tensors cover only ", covered));
  }
}

}  // namespace

std::uint64_t checked_header_length(std::string_view source, std::span<const std::byte> first_bytes,
                                    std::uint64_t file_size) {
  if (file_size < kHeaderLengthBytes) {
    throw InputError(str(source, ": file is ", file_size, " bytes, shorter than the 8-byte header length"));
  }
  if (first_bytes.size() < kHeaderLengthBytes) {
    throw std::logic_error("checked_header_length: fewer than 8 bytes given for a file of 8 bytes or more");
  }
  const std::uint64_t length = load_le_u64(first_bytes.data());
  if (length > kMaxHeaderBytes) {
    throw InputError(str(source, ": header length ", length, " exceeds the ", kMaxHeaderBytes, "-byte limit"));
  }
  if (length > file_size - kHeaderLengthBytes) {
    throw InputError(
        str(source, ": header length ", length, " reaches beyond the end of the file (", file_size, " bytes)"));
  }
  return length;
}

Layout parse_layout(std::string_view source, std::string_view header_text, std::uint64_t file_size) {
  Layout layout;
  layout.header_length = header_text.size();
  layout.data_start = kHeaderLengthBytes + layout.header_length;
  if (file_size < layout.data_start) throw std::logic_error("parse_layout: header longer than the file");
  layout.data_size = file_size - layout.data_start;

  const json header = parse_strict_json(header_text, str(source, ": header"), kMaxHeaderJsonDepth);
  if (!header.is_object()) throw InputError(str(source, ": header is ", describe(header), ", not a JSON object"));
  // The format requires the first byte to be '{' (JSON would also allow leading whitespace);
  // padding is only ever trailing.
  if (header_text.front() != '{') throw InputError(str(source, ": header must begin with '{'"));

  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      layout.metadata = parse_metadata(source, value);
    } else {
      layout.tensors.emplace(key, parse_tensor_entry(source, key, value, layout.data_size));
    }
  }
  check_ranges_tile_data(source, layout);
  return layout;
}

}  // namespace dflash::safetensors
