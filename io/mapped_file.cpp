#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>
#include <stdexcept>
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

namespace {

// The guarded copy running on this thread: where to jump back to, and the bytes whose fault it
// answers. A signal handler may read these (thread_local of the executable: no allocation).
struct CopyGuard {
  sigjmp_buf* resume = nullptr;
  const std::byte* begin = nullptr;
  const std::byte* end = nullptr;
};
thread_local CopyGuard t_guard;
struct sigaction g_previous_sigbus {};

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const auto* address = static_cast<const std::byte*>(info->si_addr);
  if (t_guard.resume != nullptr && address >= t_guard.begin && address < t_guard.end) {
    siglongjmp(*t_guard.resume, 1);
  }
  // Not a guarded copy's fault: hand it to whoever had SIGBUS before. With the default action,
  // returning re-runs the faulting access, which then ends the process as it would have.
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    g_previous_sigbus.sa_sigaction(signal, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_IGN && g_previous_sigbus.sa_handler != SIG_DFL) {
    g_previous_sigbus.sa_handler(signal);
  } else {
    ::sigaction(SIGBUS, &g_previous_sigbus, nullptr);
  }
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (::sigaction(SIGBUS, &action, &g_previous_sigbus) != 0) {
      throw std::runtime_error(str("cannot install the SIGBUS handler of mapped reads: ", std::strerror(errno)));
    }
  });
}

}  // namespace

bool MappedFile::run_guarded(void (*copy)(void*), void* context) const {
  install_sigbus_handler();
  const CopyGuard outer = t_guard;
  sigjmp_buf resume;
  if (sigsetjmp(resume, /*savemask=*/1) != 0) {  // back from on_sigbus: the map lost bytes under the copy
    t_guard = outer;
    return false;
  }
  t_guard = {&resume, data_, data_ + size_};
  try {
    copy(context);
  } catch (...) {
    t_guard = outer;
    throw;
  }
  t_guard = outer;
  return true;
}

void MappedFile::throw_cut_during_copy() const {
  require_unshrunk();  // names the sizes when the file is still shorter
  throw_input_error(mapping_ ? mapping_->path : std::string("mapped file"),
                    "lost bytes under its map while they were being read (truncated and restored?)");
}

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
