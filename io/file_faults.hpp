// The fault point of the write helpers (io/file_write.hpp): every create, write, flush to disk,
// rename and directory creation they make asks it first whether to fail, as a full (ENOSPC) or
// failing (EIO) disk would. Nothing arms it in production, where it answers 0 at the cost of one
// check of an empty function; the checking harness (harness/file_fault_injector.hpp) arms it to
// fail each such operation of a checkpoint save or a metrics line in turn.
#pragma once

#include <filesystem>
#include <functional>

namespace dflash {

enum class FileOperation { create, write, sync, rename, make_directory };

const char* file_operation_name(FileOperation operation);

// Returns the errno to fail `operation` on `path` with, or 0 to let it run.
using FileFaultHook = std::function<int(FileOperation operation, const std::filesystem::path& path)>;

// Installs `hook` (an empty one disarms); returns the hook it replaces.
FileFaultHook set_file_fault_hook(FileFaultHook hook);

// What the installed hook answers for this operation (0 when none is installed).
int injected_file_fault(FileOperation operation, const std::filesystem::path& path);

}  // namespace dflash
