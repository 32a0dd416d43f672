#include "planner/device_fit.hpp"

#include <algorithm>

#include "planner/checked_bytes.hpp"

namespace dflash {

DeviceFit device_fit(std::int64_t total_bytes, std::int64_t device_bytes) {
  require_at_least(device_bytes, 1, "gpu_memory");
  DeviceFit f;
  f.device_bytes = device_bytes;
  // floor(5% of the device), written so that it cannot overflow.
  const std::int64_t percent = device_bytes / 100 * kHeadroomPercent + device_bytes % 100 * kHeadroomPercent / 100;
  f.headroom_bytes = std::max(percent, kHeadroomMinimumBytes);
  f.usable_bytes = device_bytes - f.headroom_bytes;
  f.total_bytes = total_bytes;
  f.fits = total_bytes <= f.usable_bytes;
  return f;
}

}  // namespace dflash
