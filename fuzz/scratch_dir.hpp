// A per-process scratch directory for fuzz targets whose reader takes a path, not bytes: the
// input is written to a file there and read back by the reader as a user's file would be. The
// directory is made under $TMPDIR (ci/fuzz points it at a per-run folder it removes) and named by
// the process id, so parallel fuzzers (-jobs, -workers) never share a file.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace dflash::fuzz {

inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
                              ("dflash-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes `size` bytes to `path` (replacing it); aborts if the disk refuses, which is no finding of
// the reader's.
inline void write_bytes(const std::filesystem::path& path, const void* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.flush()) std::abort();
}

}  // namespace dflash::fuzz
