#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "io/errors.hpp"
#include "io/file_read.hpp"

namespace dflash {

struct MappedFile::Mapping {
  std::string path;
  void* address = nullptr;
  std::size_t length = 0;
  ~Mapping() {
    if (address != nullptr) ::munmap(address, length);
  }
};

void MappedFile::require_unshrunk() const {
  if (!mapping_) return;
  // By path, not by a descriptor kept open: a set may have more shards than a process may hold
  // descriptors. A file renamed over the shard's name is refused too, though its map stays valid.
  struct stat st {};
  if (::stat(mapping_->path.c_str(), &st) != 0) {
    throw_input_error(mapping_->path, str("cannot be read any more: ", std::strerror(errno)));
  }
  if (std::uint64_t(st.st_size) < mapping_->length) {
    throw_input_error(mapping_->path, str("shrank from ", mapping_->length, " to ", st.st_size,
                                          " bytes while it was being read (truncated or rewritten?)"));
  }
}

MappedFile MappedFile::open(const std::filesystem::path& path) {
  // A regular file only: a FIFO would block the open, a device has no size to map.
  const RegularFile file = RegularFile::open(path);
  auto mapping = std::make_shared<Mapping>();
  mapping->path = path.string();
  mapping->length = static_cast<std::size_t>(file.size());
  if (mapping->length > 0) {
    void* address = ::mmap(nullptr, mapping->length, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (address == MAP_FAILED) throw_input_error(path.string(), str("cannot be mapped: ", std::strerror(errno)));
    mapping->address = address;
  }
  // `file` is closed on return: the map keeps the file open.
  MappedFile f;
  f.data_ = static_cast<const std::byte*>(mapping->address);
  f.size_ = mapping->length;
  f.mapping_ = std::move(mapping);
  return f;
}

}  // namespace dflash
