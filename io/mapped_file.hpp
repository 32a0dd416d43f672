// A read-only memory map of a whole file. The feature shards of a run are far larger than host
// memory at full scale (TRAINING §14): mapping them lets the kernel page rows in as the data
// order visits them, and out again, so the set is never held in memory.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>

namespace dflash {

class MappedFile {
 public:
  // Throws dflash::InputError naming the path when the file cannot be opened or mapped.
  static MappedFile open(const std::filesystem::path& path);

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }

  // Throws dflash::InputError naming the path when the file is now shorter than its map: a read of
  // the map past the new end would kill the process with SIGBUS. Readers call it before they copy
  // from the map (one stat); a file cut between the check and the copy can still fault.
  void require_unshrunk() const;

 private:
  struct Mapping;
  std::shared_ptr<const Mapping> mapping_;  // shared: copies of a shard share one map
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace dflash
