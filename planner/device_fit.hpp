// Whether a plan fits a device. Headroom: a plan must leave max(5% of the device, 2 GiB) free,
// for what no plan lists: the CUDA context and cuBLAS/NCCL workspaces (about 1 GiB together on
// current drivers), and allocator fragmentation (a few % of a caching allocator's pool).
#pragma once

#include <cstdint>

namespace dflash {

inline constexpr std::int64_t kHeadroomMinimumBytes = std::int64_t(2) << 30;
inline constexpr std::int64_t kHeadroomPercent = 5;

struct DeviceFit {
  std::int64_t device_bytes = 0;
  std::int64_t headroom_bytes = 0;                                        // max(5% of device, 2 GiB)
  std::int64_t usable_bytes = 0;                                          // device - headroom
  std::int64_t total_bytes = 0;                                           // the plan's total
  bool fits = false;                                                      // total <= usable
  std::int64_t free_bytes() const { return usable_bytes - total_bytes; }  // negative when it does not fit
};

// Throws InputError naming "gpu_memory" when device_bytes < 1.
DeviceFit device_fit(std::int64_t total_bytes, std::int64_t device_bytes);

}  // namespace dflash
