// Every file a run, a golden or an export writes goes through these: whatever fails (a full or
// failing disk, a killed process), a file holds its old contents or all of its new ones, never a
// part, and nothing is written through a link.
//
// A new version of a file is written to a temporary file created exclusively beside it (mkstemp:
// O_CREAT|O_EXCL under a random name, so a link planted at any name is never followed), flushed
// to disk, renamed over the final name, and the directory flushed (a rename is durable only then).
// Every step is checked; a failure removes the temporary and throws std::runtime_error naming the
// file, the step and the system's reason. Each step first asks the fault point of
// io/file_faults.hpp, which only a test arms.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>
#include <vector>

namespace dflash {

// `path` replaced whole by `bytes`.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// The same for a file written in pieces: the temporary is created on construction, written by
// write(), and renamed over `path` by commit(); destroyed uncommitted, it is removed.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t size);
  void commit();

 private:
  [[noreturn]] void fail(std::string_view step, int error_number);
  void flush_buffer();

  std::filesystem::path path_, temporary_;
  int fd_ = -1;
  // Small pieces (a safetensors header, a norm's weights) are gathered into writes of up to 1 MiB:
  // one system call each instead of one per piece.
  std::vector<char> buffer_;
};

// A file records are appended to as a run goes (metrics.jsonl): opened without following a link,
// each append written whole and flushed to disk, or cut back to where it was and refused.
class AppendOnlyFile {
 public:
  AppendOnlyFile() = default;
  explicit AppendOnlyFile(std::filesystem::path path);
  ~AppendOnlyFile();
  AppendOnlyFile(AppendOnlyFile&& other) noexcept;
  AppendOnlyFile& operator=(AppendOnlyFile&& other) noexcept;

  bool is_open() const { return fd_ >= 0; }
  void append(std::string_view text);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// A new directory (an existing one is an error, as is a failure), through the fault point.
void make_directory(const std::filesystem::path& path);

// rename(2) through the fault point: `from` replaces `to` (an empty directory, or a file).
void rename_path(const std::filesystem::path& from, const std::filesystem::path& to);

// Flushes a directory's entries to disk.
void sync_directory(const std::filesystem::path& dir);

}  // namespace dflash
