// Reads of the run's own files, none of which is trusted to be what its name says: each is opened
// without blocking (a FIFO never hangs a read), refused unless it is a regular file (a FIFO, a
// device such as /dev/zero, a directory, a dangling link: each named with the path), and refused
// above the bound its reader states (io/file_limits.hpp) before a byte of it is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace dflash {

// An open regular file (links followed). Throws dflash::InputError naming the path and what it is.
class RegularFile {
 public:
  static RegularFile open(const std::filesystem::path& path);
  ~RegularFile();
  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&&) = delete;
  RegularFile(const RegularFile&) = delete;

  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  RegularFile(std::filesystem::path path, int fd, std::uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// The whole of a regular file of at most `max_bytes` bytes (one that grows past it while being read
// is refused too). Throws dflash::InputError naming the path.
std::string read_regular_file(const std::filesystem::path& path, std::uint64_t max_bytes);

// Throws dflash::InputError naming `path` unless it is (or links to) a regular file: for files
// other readers then open (mapped shards, safetensors).
void require_regular_file(const std::filesystem::path& path);

}  // namespace dflash
