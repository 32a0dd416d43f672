// Parsing and validating the front of a safetensors file: the 8-byte header length and the JSON
// header, checked against the file's size so that nothing later can read outside the file.
//
// Layout: [u64 little-endian N][N bytes of UTF-8 JSON, starting with '{', possibly padded with
// spaces][data section]. The JSON maps each tensor name to {"dtype", "shape", "data_offsets"},
// offsets relative to the data section; the optional "__metadata__" is a string -> string map.
// The tensors' byte ranges must tile the data section exactly: no overlap, no hole, nothing
// after the last one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "io/safetensors_tensor.hpp"

namespace dflash::safetensors {

inline constexpr std::size_t kHeaderLengthBytes = 8;
// The same limit as the Python/Rust package: a bigger header is hostile, not a model.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// The reserved header key holding the metadata map.
inline constexpr std::string_view kMetadataKey = "__metadata__";

using Metadata = std::map<std::string, std::string>;
using TensorTable = std::map<std::string, TensorInfo, std::less<>>;

// What a validated header says about a file.
struct Layout {
  std::uint64_t header_length = 0;  // N
  std::uint64_t data_start = 0;     // 8 + N: where the data section begins in the file
  std::uint64_t data_size = 0;      // file size - data_start
  TensorTable tensors;              // by name
  Metadata metadata;
};

// N from the file's first bytes, checked: the file holds the 8-byte field, N is within the
// 100 MB limit, and the header fits in the file. `first_bytes` holds the first
// min(8, file_size) bytes of the file. Throws dflash::InputError "<source>: <problem>".
std::uint64_t checked_header_length(std::string_view source, std::span<const std::byte> first_bytes,
                                    std::uint64_t file_size);

// The validated layout of a file of `file_size` bytes whose header (the N bytes after the length
// field) is `header_text`. Throws dflash::InputError "<source>: <problem>".
Layout parse_layout(std::string_view source, std::string_view header_text, std::uint64_t file_size);

}  // namespace dflash::safetensors
