#include "io/file_faults.hpp"

#include <mutex>
#include <utility>

namespace dflash {
namespace {

std::mutex& hook_mutex() {
  static std::mutex m;
  return m;
}

FileFaultHook& installed_hook() {
  static FileFaultHook hook;
  return hook;
}

}  // namespace

const char* file_operation_name(FileOperation operation) {
  switch (operation) {
    case FileOperation::create:
      return "create";
    case FileOperation::write:
      return "write";
    case FileOperation::sync:
      return "sync";
    case FileOperation::rename:
      return "rename";
    case FileOperation::make_directory:
      return "make_directory";
  }
  return "unknown";
}

FileFaultHook set_file_fault_hook(FileFaultHook hook) {
  const std::lock_guard<std::mutex> lock(hook_mutex());
  return std::exchange(installed_hook(), std::move(hook));
}

int injected_file_fault(FileOperation operation, const std::filesystem::path& path) {
  const std::lock_guard<std::mutex> lock(hook_mutex());
  return installed_hook() ? installed_hook()(operation, path) : 0;
}

}  // namespace dflash
