// A read-only memory map of a whole file. The feature shards of a run are far larger than host
// memory at full scale (TRAINING §14): mapping them lets the kernel page rows in as the data
// order visits them, and out again, so the set is never held in memory.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <type_traits>

namespace dflash {

class MappedFile {
 public:
  // Throws dflash::InputError naming the path when the file cannot be opened or mapped.
  static MappedFile open(const std::filesystem::path& path);

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }

  // Throws dflash::InputError naming the path when the file is now shorter than its map: a read of
  // the map past the new end would kill the process with SIGBUS. Readers call it before they copy
  // from the map (one stat), so that a file cut earlier is named without a fault.
  void require_unshrunk() const;

  // Runs `copy`, which reads this map, so that a file cut under it during the copy (after
  // require_unshrunk, which cannot see the future) throws dflash::InputError naming the path
  // instead of killing the process with SIGBUS. `copy` must only read the map and write memory
  // that already exists: a fault leaves it with a jump, so nothing in it may need a destructor
  // or allocate. A SIGBUS outside this map's bytes, or outside a guarded copy, is not caught.
  template <class Copy>
  void copy_guarded(Copy&& copy) const {
    if (!run_guarded(&call<Copy>, &copy)) throw_cut_during_copy();
  }

 private:
  template <class Copy>
  static void call(void* copy) {
    (*static_cast<std::remove_reference_t<Copy>*>(copy))();
  }
  bool run_guarded(void (*copy)(void*), void* context) const;
  [[noreturn]] void throw_cut_during_copy() const;

  struct Mapping;
  std::shared_ptr<const Mapping> mapping_;  // shared: copies of a shard share one map
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace dflash
