// DFLASH_REQUIRE_GPU=1 says a GPU must be usable here (ci/gpu sets it on the machine lent one):
// whatever would skip for want of a GPU (GPU tests, `dflash verify --device cuda`, the CUDA
// benchmark) fails instead, so a broken device setup never reads as a skip. Host code only.
#pragma once

#include <cstdlib>
#include <string_view>

namespace dflash {

inline bool gpu_required() {
  const char* v = std::getenv("DFLASH_REQUIRE_GPU");
  return v != nullptr && std::string_view(v) == "1";
}

}  // namespace dflash
