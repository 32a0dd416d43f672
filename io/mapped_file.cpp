#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/errors.hpp"

namespace dflash {

struct MappedFile::Mapping {
  void* address = nullptr;
  std::size_t length = 0;
  ~Mapping() {
    if (address != nullptr) ::munmap(address, length);
  }
};

MappedFile MappedFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_input_error(path.string(), str("cannot be opened: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw_input_error(path.string(), str("cannot be read: ", std::strerror(e)));
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->length = static_cast<std::size_t>(st.st_size);
  if (mapping->length > 0) {
    void* address = ::mmap(nullptr, mapping->length, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw_input_error(path.string(), str("cannot be mapped: ", std::strerror(e)));
    }
    mapping->address = address;
  }
  ::close(fd);  // the map keeps the file open
  MappedFile f;
  f.data_ = static_cast<const std::byte*>(mapping->address);
  f.size_ = mapping->length;
  f.mapping_ = std::move(mapping);
  return f;
}

}  // namespace dflash
