// Counts every byte the reference allocates, by category, with current and peak values. The
// categories are those of a memory plan (SPEC §8): each has its own remedy (sharding attacks
// parameters, gradients and optimizer state; checkpointing attacks saved activations; chunking
// attacks transient workspace), so a peak is only useful if it says which one grew.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace dflash {

enum class MemoryCategory : int {
  parameters,     // trainable parameters
  frozen,         // frozen parameters (embedding, lm_head)
  gradients,      // parameter gradients and input gradients handed back to the caller
  optimizer,      // optimizer state, master weights
  inputs,         // batch inputs (tokens, features, teacher hidden states)
  saved,          // trunk activations kept from forward until backward
  loss_saved,     // what the loss head keeps from forward until backward (its policy decides)
  transient,      // workspace that lives within one phase (a chunk's logits, a layer's scratch)
  outputs,        // per-row results returned to the caller (lse, token loss)
  communication,  // collective buffers
};
inline constexpr int kMemoryCategoryCount = 10;

std::string_view category_name(MemoryCategory category);

class MemoryTracker {
 public:
  void allocate(MemoryCategory category, std::size_t bytes);
  void release(MemoryCategory category, std::size_t bytes);

  std::size_t current(MemoryCategory category) const { return current_[index(category)]; }
  std::size_t peak(MemoryCategory category) const { return peak_[index(category)]; }
  std::size_t current_total() const { return current_total_; }
  std::size_t peak_total() const { return peak_total_; }

  // Peaks restart from the current values (to measure one phase).
  void reset_peaks();

  // One line per non-empty category: "saved: current 1024 B, peak 4096 B".
  std::string report() const;

 private:
  static int index(MemoryCategory category) { return static_cast<int>(category); }
  std::array<std::size_t, kMemoryCategoryCount> current_{};
  std::array<std::size_t, kMemoryCategoryCount> peak_{};
  std::size_t current_total_ = 0;
  std::size_t peak_total_ = 0;
};

}  // namespace dflash
