// configs/tiny.json of the source tree the reference tests were built from (DFLASH_SOURCE_DIR): the
// drafter of the step, attention and thread tests.
#pragma once

#include <filesystem>

namespace dflash {

inline std::filesystem::path tiny_config_path() {
  return std::filesystem::path(DFLASH_SOURCE_DIR) / "configs" / "tiny.json";
}

}  // namespace dflash
