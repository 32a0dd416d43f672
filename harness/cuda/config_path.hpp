// The config files (configs/) of the tests, properties and verify rows that run on the device
// machine: its checkout lies elsewhere than the one the staged binaries were built from, so
// $DFLASH_SOURCE_DIR (ci/gpu run sets it) comes first, then the directory compiled in.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace dflash {

inline std::filesystem::path drafter_config_file(const char* file, const std::filesystem::path& built_config_dir) {
  const char* source = std::getenv("DFLASH_SOURCE_DIR");
  return (source != nullptr ? std::filesystem::path(source) / "configs" : built_config_dir) / file;
}

#ifdef DFLASH_SOURCE_DIR
// In a test built with DFLASH_SOURCE_DIR (the source tree): configs/<file>.
inline std::filesystem::path test_config_file(const char* file) {
  return drafter_config_file(file, std::filesystem::path(DFLASH_SOURCE_DIR) / "configs");
}
#endif

}  // namespace dflash
