#include "reference/memory_tracker.hpp"

#include <algorithm>
#include <stdexcept>

#include "io/errors.hpp"

namespace dflash {

std::string_view category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters:
      return "parameters";
    case MemoryCategory::frozen:
      return "frozen";
    case MemoryCategory::gradients:
      return "gradients";
    case MemoryCategory::optimizer:
      return "optimizer";
    case MemoryCategory::inputs:
      return "inputs";
    case MemoryCategory::saved:
      return "saved";
    case MemoryCategory::loss_saved:
      return "loss_saved";
    case MemoryCategory::transient:
      return "transient";
    case MemoryCategory::outputs:
      return "outputs";
    case MemoryCategory::communication:
      return "communication";
  }
  return "unknown";
}

void MemoryTracker::allocate(MemoryCategory category, std::size_t bytes) {
  const int i = index(category);
  current_[i] += bytes;
  peak_[i] = std::max(peak_[i], current_[i]);
  current_total_ += bytes;
  peak_total_ = std::max(peak_total_, current_total_);
}

void MemoryTracker::release(MemoryCategory category, std::size_t bytes) {
  const int i = index(category);
  if (bytes > current_[i]) {
    // A release that exceeds what was allocated is a bookkeeping bug, never bad user input.
    throw std::logic_error(str("MemoryTracker: releasing ", bytes, " B of '", category_name(category), "' but only ",
                               current_[i], " B are allocated"));
  }
  current_[i] -= bytes;
  current_total_ -= bytes;
}

void MemoryTracker::reset_peaks() {
  peak_ = current_;
  peak_total_ = current_total_;
}

std::string MemoryTracker::report() const {
  std::string out;
  for (int i = 0; i < kMemoryCategoryCount; ++i) {
    if (peak_[i] == 0) continue;
    out += str(category_name(static_cast<MemoryCategory>(i)), ": current ", current_[i], " B, peak ", peak_[i], " B\n");
  }
  out += str("total: current ", current_total_, " B, peak ", peak_total_, " B\n");
  return out;
}

}  // namespace dflash
