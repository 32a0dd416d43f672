// Helpers shared by the golden-file tests: generated goldens (once per test binary), the
// committed golden directory, and a golden taken apart into raw tensors so that a test can
// break one thing and write the file back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "golden/cases.hpp"
#include "io/safetensors.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash::golden_testing {

using safetensors::testing::ScratchDirectory;

// The bytes of each case's generated golden, generated once per test binary.
inline const std::vector<std::byte>& generated_bytes(const std::string& case_name) {
  static std::map<std::string, std::vector<std::byte>> cache;
  auto it = cache.find(case_name);
  if (it == cache.end()) it = cache.emplace(case_name, golden_bytes(generate_golden(golden_case(case_name)))).first;
  return it->second;
}

inline std::filesystem::path committed_golden(const std::string& case_name) {
  return default_golden_dir() / golden_file_name(case_name);
}

// A safetensors file as plain data: metadata and every tensor's dtype, shape and bytes.
struct RawTensor {
  safetensors::Dtype dtype;
  safetensors::Shape shape;
  std::vector<std::byte> bytes;
};

struct RawFile {
  safetensors::Metadata metadata;
  std::map<std::string, RawTensor> tensors;

  static RawFile of(std::span<const std::byte> bytes) {
    const safetensors::Reader reader = safetensors::Reader::from_bytes(bytes);
    RawFile raw{reader.metadata(), {}};
    for (const std::string& name : reader.names()) {
      safetensors::TensorData t = reader.tensor(name);
      raw.tensors[name] = RawTensor{t.info.dtype, t.info.shape, std::move(t.bytes)};
    }
    return raw;
  }

  std::vector<std::byte> bytes() const {
    safetensors::Writer writer;
    for (const auto& [key, value] : metadata) writer.set_metadata(key, value);
    for (const auto& [name, t] : tensors) writer.add_bytes(name, t.dtype, t.shape, t.bytes);
    return writer.to_bytes();
  }

  // Element i of an F64 / I64 tensor.
  double float_at(const std::string& name, std::size_t i) const {
    return safetensors::load_float_element(safetensors::Dtype::F64, tensors.at(name).bytes.data() + 8 * i);
  }
  void set_float(const std::string& name, std::size_t i, double value) {
    safetensors::store_float_element(safetensors::Dtype::F64, value, tensors.at(name).bytes.data() + 8 * i);
  }
  void set_integer(const std::string& name, std::size_t i, std::int64_t value) {
    safetensors::store_integer_element(safetensors::Dtype::I64, value, tensors.at(name).bytes.data() + 8 * i);
  }
};

// The message of the InputError `f` throws, or "(no error)".
template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// Writes `raw` into `dir` as <name> and returns the path.
inline std::filesystem::path write_raw(const ScratchDirectory& dir, const std::string& name, const RawFile& raw) {
  const std::filesystem::path path = dir / name;
  safetensors::testing::write_whole_file(path, raw.bytes());
  return path;
}

}  // namespace dflash::golden_testing
