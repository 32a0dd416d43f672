#include "io/file_read.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "io/errors.hpp"

namespace dflash {

namespace {

// What a non-regular file is, for the error.
std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

[[noreturn]] void refuse_unopenable(const std::filesystem::path& path, int error_number) {
  struct stat link {};
  if (error_number == ENOENT && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    throw_input_error(path.string(), "is a dangling symbolic link, not a regular file");
  }
  throw_input_error(path.string(), str("cannot be opened: ", std::strerror(error_number)));
}

}  // namespace

RegularFile RegularFile::open(const std::filesystem::path& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It changes nothing
  // for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) refuse_unopenable(path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw_input_error(path.string(), str("cannot be read: ", std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_input_error(path.string(), str("is ", kind_of(st.st_mode), ", not a regular file"));
  }
  return RegularFile(path, fd, std::uint64_t(st.st_size));
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

std::string read_regular_file(const std::filesystem::path& path, std::uint64_t max_bytes) {
  const RegularFile file = RegularFile::open(path);
  const auto too_large = [&](std::uint64_t bytes) {
    throw_input_error(path.string(), str(bytes, " bytes exceeds the ", max_bytes, "-byte limit for this file"));
  };
  if (file.size() > max_bytes) too_large(file.size());
  std::string text(static_cast<std::size_t>(file.size()), '\0');
  std::size_t done = 0;
  const auto read_some = [&](char* into, std::size_t count) {
    for (;;) {
      const ssize_t n = ::read(file.fd(), into, count);
      if (n >= 0) return std::size_t(n);
      if (errno != EINTR) throw_input_error(path.string(), str("cannot be read: ", std::strerror(errno)));
    }
  };
  while (done < text.size()) {
    const std::size_t n = read_some(text.data() + done, text.size() - done);
    if (n == 0) break;  // shrank since fstat
    done += n;
  }
  text.resize(done);
  // Grown since fstat: read on, a page at a time, while it stays within the bound.
  char more[4096];
  while (const std::size_t n = read_some(more, sizeof more)) {
    text.append(more, n);
    if (text.size() > max_bytes) too_large(text.size());
  }
  return text;
}

void require_regular_file(const std::filesystem::path& path) { RegularFile::open(path); }

}  // namespace dflash
