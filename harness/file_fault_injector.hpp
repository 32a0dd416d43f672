// Arms io/file_faults.hpp's fault point for the lifetime of the object, to test that what a run
// writes survives a full or failing disk: every operation of the write helpers is counted, and the
// one numbered `fail_at` (from 0) among those `selected` fails with `error_number` (ENOSPC, EIO),
// as the disk would have. A count taken with fail_at = -1 tells a test how many there are.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>

#include "io/file_faults.hpp"

namespace dflash::testing {

class FileFaultInjector {
 public:
  using Selection = std::function<bool(FileOperation, const std::filesystem::path&)>;

  FileFaultInjector(std::int64_t fail_at, int error_number, Selection selected = {})
      : fail_at_(fail_at), error_number_(error_number), selected_(std::move(selected)) {
    previous_ = set_file_fault_hook([this](FileOperation operation, const std::filesystem::path& path) {
      if (selected_ && !selected_(operation, path)) return 0;
      if (seen_++ != fail_at_) return 0;
      failed_ = std::string(file_operation_name(operation)) + " " + path.string();
      return error_number_;
    });
  }
  ~FileFaultInjector() { set_file_fault_hook(std::move(previous_)); }
  FileFaultInjector(const FileFaultInjector&) = delete;
  FileFaultInjector& operator=(const FileFaultInjector&) = delete;

  // Selected operations seen so far.
  std::int64_t operations_seen() const { return seen_; }
  // "<operation> <path>" of the operation made to fail, or empty while none has been.
  const std::string& failed() const { return failed_; }

 private:
  std::int64_t fail_at_;
  int error_number_;
  Selection selected_;
  std::int64_t seen_ = 0;
  std::string failed_;
  FileFaultHook previous_;
};

}  // namespace dflash::testing
