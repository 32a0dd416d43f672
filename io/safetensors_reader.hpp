// Reading safetensors files: the header is parsed and fully validated up front (see
// safetensors_header.hpp), then tensors are read by name.
//
// Two sources: a file on disk, whose tensor bytes are read on demand (so a 5 GB weight shard
// costs only its header until a tensor is asked for), and a byte buffer held in memory (the
// fuzzer's entry point, and handy for tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors_header.hpp"
#include "io/safetensors_tensor.hpp"

namespace dflash::safetensors {

class Reader {
 public:
  // Opens `path` and validates its header against the file's size. Throws dflash::InputError
  // naming the path for a missing or unreadable file and for any malformed header.
  static Reader open_file(const std::filesystem::path& path);

  // Validates `bytes` as a whole safetensors file and keeps a copy. `source` names the buffer in
  // error messages.
  static Reader from_bytes(std::span<const std::byte> bytes, std::string source = "<memory>");

  // The file path (or buffer name) used in error messages.
  const std::string& source() const { return source_; }
  const Layout& layout() const { return layout_; }
  const Metadata& metadata() const { return layout_.metadata; }

  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(std::string_view name) const;
  // Throws dflash::InputError if there is no tensor `name`.
  const TensorInfo& info(std::string_view name) const;

  // The tensor's bytes (read from disk now for a file source).
  TensorData tensor(std::string_view name) const;
  // Elements [first, first + out.size()) of a float tensor (F64, F32, BF16, F16), C order, each
  // exactly as to_doubles gives it; only those bytes are read. For a reader that converts a tensor a
  // piece at a time instead of holding its bytes and its doubles at once (a 1.27e9-element
  // embedding is 2.5 GB of BF16 and 10 GB of doubles). Throws dflash::InputError naming the tensor
  // for another dtype or a range outside it.
  void read_float_elements(std::string_view name, std::uint64_t first, std::span<double> out) const;
  // Shorthands for to_doubles(tensor(name)) and to_int64s(tensor(name)).
  std::vector<double> doubles(std::string_view name) const;
  std::vector<std::int64_t> int64s(std::string_view name) const;

 private:
  Reader() = default;

  std::string source_;
  Layout layout_;
  std::filesystem::path path_;                            // file source
  std::shared_ptr<const std::vector<std::byte>> memory_;  // memory source (shared: Reader copies cheaply)
};

}  // namespace dflash::safetensors
