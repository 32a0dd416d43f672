#include "io/file_write.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "io/errors.hpp"
#include "io/file_faults.hpp"

namespace dflash {

namespace {

[[noreturn]] void fail_on(const std::filesystem::path& path, std::string_view step, int error_number) {
  throw std::runtime_error(str("cannot write ", path.string(), ": ", step, ": ", std::strerror(error_number)));
}

// The fault point's answer, or else the system call's result (-1 with errno set on failure).
template <class Call>
auto checked_call(FileOperation operation, const std::filesystem::path& path, Call&& call) -> decltype(call()) {
  if (const int injected = injected_file_fault(operation, path); injected != 0) {
    errno = injected;
    return -1;
  }
  return call();
}

// Writes all of `size` bytes (write(2) may write fewer), or returns the errno.
int write_all(int fd, const std::filesystem::path& path, const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = checked_call(FileOperation::write, path, [&] { return ::write(fd, p, size); });
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    size -= std::size_t(n);
  }
  return 0;
}

int sync_fd(int fd, const std::filesystem::path& path) {
  return checked_call(FileOperation::sync, path, [&] { return ::fsync(fd); }) == 0 ? 0 : errno;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path) : path_(std::move(path)) {
  std::string pattern = path_.string() + ".tmp.XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  fd_ = checked_call(FileOperation::create, path_, [&] { return ::mkostemp(name.data(), O_CLOEXEC); });
  if (fd_ < 0) fail_on(path_, "cannot create temporary file beside it", errno);
  temporary_ = name.data();
  if (::fchmod(fd_, 0644) != 0) fail("cannot set the temporary file's mode", errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

void AtomicFileWriter::fail(std::string_view step, int error_number) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
  fail_on(path_, step, error_number);
}

constexpr std::size_t kWriteBufferBytes = std::size_t(1) << 20;

void AtomicFileWriter::flush_buffer() {
  if (buffer_.empty()) return;
  if (const int e = write_all(fd_, path_, buffer_.data(), buffer_.size()); e != 0) {
    fail("cannot write the temporary file", e);
  }
  buffer_.clear();
}

void AtomicFileWriter::write(const void* data, std::size_t size) {
  if (fd_ < 0) throw std::logic_error(str("AtomicFileWriter: ", path_.string(), " is already committed"));
  if (buffer_.size() + size > kWriteBufferBytes) flush_buffer();
  if (size >= kWriteBufferBytes) {
    if (const int e = write_all(fd_, path_, data, size); e != 0) fail("cannot write the temporary file", e);
    return;
  }
  const auto* bytes = static_cast<const char*>(data);
  buffer_.insert(buffer_.end(), bytes, bytes + size);
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw std::logic_error(str("AtomicFileWriter: ", path_.string(), " is already committed"));
  flush_buffer();
  if (const int e = sync_fd(fd_, path_); e != 0) fail("cannot flush the temporary file to disk", e);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail("cannot close the temporary file", errno);
  if (checked_call(FileOperation::rename, path_, [&] { return ::rename(temporary_.c_str(), path_.c_str()); }) != 0) {
    fail("cannot rename the temporary file into place", errno);
  }
  temporary_.clear();
  const std::filesystem::path dir = path_.parent_path().empty() ? std::filesystem::path(".") : path_.parent_path();
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail_on(path_, str("renamed into place, but cannot open ", dir.string(), " to flush it"), errno);
  const int e = sync_fd(dir_fd, dir);
  ::close(dir_fd);
  if (e != 0) fail_on(path_, str("renamed into place, but cannot flush ", dir.string(), " to disk"), e);
}

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  AtomicFileWriter file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

AppendOnlyFile::AppendOnlyFile(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = checked_call(FileOperation::create, path_, [&] {
    return ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  });
  if (fd_ < 0) {
    fail_on(path_, errno == ELOOP ? "it is a symbolic link (records are never appended through a link)" : "cannot open",
            errno);
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    fail_on(path_, "not a regular file", e != 0 ? e : EINVAL);
  }
}

AppendOnlyFile::~AppendOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

AppendOnlyFile::AppendOnlyFile(AppendOnlyFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

AppendOnlyFile& AppendOnlyFile::operator=(AppendOnlyFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void AppendOnlyFile::append(std::string_view text) {
  if (fd_ < 0) throw std::logic_error("AppendOnlyFile: append to a file that is not open");
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  if (before < 0) fail_on(path_, "cannot find its end", errno);
  int e = write_all(fd_, path_, text.data(), text.size());
  const char* step = "cannot append";
  if (e == 0) {
    e = sync_fd(fd_, path_);
    step = "cannot flush the appended record to disk";
  }
  if (e != 0) {
    // A part of a record must not stay: the next reader would take it for a damaged line.
    if (::ftruncate(fd_, before) != 0) {
      fail_on(path_, str(step, " (", std::strerror(e), "), then cannot cut the partial record off"), errno);
    }
    fail_on(path_, step, e);
  }
}

void make_directory(const std::filesystem::path& path) {
  if (checked_call(FileOperation::make_directory, path, [&] { return ::mkdir(path.c_str(), 0755); }) != 0) {
    fail_on(path, "cannot create the directory", errno);
  }
}

void rename_path(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (checked_call(FileOperation::rename, to, [&] { return ::rename(from.c_str(), to.c_str()); }) != 0) {
    fail_on(to, str("cannot rename ", from.string(), " to it"), errno);
  }
}

void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_on(dir, "cannot open the directory to flush it", errno);
  const int e = sync_fd(fd, dir);
  ::close(fd);
  if (e != 0) fail_on(dir, "cannot flush the directory to disk", e);
}

}  // namespace dflash
