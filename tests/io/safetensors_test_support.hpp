// Helpers shared by the safetensors tests: files assembled byte by byte, a scratch directory,
// and the message of an expected dflash::InputError.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/errors.hpp"

namespace dflash::safetensors::testing {

// [8-byte little-endian header length][header][data], the format assembled by hand.
inline std::vector<std::byte> file_bytes(std::string_view header, const std::vector<std::byte>& data = {}) {
  std::vector<std::byte> bytes;
  const std::uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::byte>((length >> (8 * i)) & 0xFFu));
  for (char c : header) bytes.push_back(static_cast<std::byte>(c));
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

inline std::vector<std::byte> zero_bytes(std::size_t count) { return std::vector<std::byte>(count, std::byte{0}); }

inline std::vector<std::byte> bytes_of(std::initializer_list<unsigned> values) {
  std::vector<std::byte> bytes;
  for (unsigned v : values) bytes.push_back(static_cast<std::byte>(v));
  return bytes;
}

// The message of the `Error` that `action` throws; a test failure if it throws nothing.
template <class Error, class Action>
std::string error_message(Action&& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an exception, nothing was thrown";
  return {};
}

template <class Action>
std::string input_error_message(Action&& action) {
  return error_message<dflash::InputError>(std::forward<Action>(action));
}

// A fresh directory under the system temp directory, removed with everything in it at the end.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("dflash-safetensors-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_whole_file(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_whole_file(const std::filesystem::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

inline std::vector<std::byte> read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
  return bytes;
}

}  // namespace dflash::safetensors::testing
