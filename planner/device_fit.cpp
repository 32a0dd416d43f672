#include "planner/device_fit.hpp"

#include <algorithm>

#include "reference/errors.hpp"

namespace dflash {

DeviceFit device_fit(std::int64_t total_bytes, std::int64_t device_bytes) {
  if (device_bytes < 1) throw_input_error("gpu_memory", str(device_bytes, " B must be at least 1 B"));
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
