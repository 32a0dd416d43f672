#include "reference/anchors.hpp"

#include <algorithm>

#include "common/dropout_rng.hpp"
#include "io/errors.hpp"

namespace dflash {

AnchorSlots sample_anchors(std::span<const std::uint8_t> loss_mask, std::int64_t max_anchors, std::uint64_t seed,
                           std::uint32_t step, std::uint32_t seq) {
  if (max_anchors < 1) throw_input_error("max_anchors", str(max_anchors, " must be at least 1"));
  if (seq >= kMaxSequenceIndex) {
    throw_input_error("sequence index", str(seq, " must be below 2^20 (SPEC §6 stream layout)"));
  }
  struct Candidate {
    std::uint32_t key;
    std::int64_t anchor;
  };
  const auto S = static_cast<std::int64_t>(loss_mask.size());
  const std::uint32_t stream = rng_stream(seq, kAnchorSamplerLayer, 0);
  std::vector<Candidate> candidates;
  for (std::int64_t a = 0; a + 1 < S; ++a) {
    if (loss_mask[a] == 0 || loss_mask[a + 1] == 0) continue;
    // Element 4a is word 0 of the Philox block with counter (a, 0, stream, step).
    candidates.push_back({rng_word(seed, stream, step, 4 * static_cast<std::uint64_t>(a)), a});
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) {
    return x.key != y.key ? x.key < y.key : x.anchor < y.anchor;
  });
  const auto kept = static_cast<std::size_t>(std::min<std::int64_t>(max_anchors, std::int64_t(candidates.size())));
  AnchorSlots slots{std::vector<std::int64_t>(static_cast<std::size_t>(max_anchors), 0),
                    std::vector<std::uint8_t>(static_cast<std::size_t>(max_anchors), 0)};
  for (std::size_t n = 0; n < kept; ++n) {
    slots.anchors[n] = candidates[n].anchor;
    slots.keep[n] = 1;
  }
  std::sort(slots.anchors.begin(), slots.anchors.begin() + static_cast<std::ptrdiff_t>(kept));
  return slots;
}

void validate_anchor_slots(std::span<const std::int64_t> anchors, std::span<const std::uint8_t> keep,
                           std::int64_t context_length, std::string_view name) {
  if (anchors.size() != keep.size()) {
    throw_input_error(name, str(anchors.size(), " anchors but ", keep.size(), " keep flags"));
  }
  if (anchors.empty()) throw_input_error(name, "no anchor slots (N must be at least 1)");
  std::int64_t previous = -1;
  for (std::size_t n = 0; n < anchors.size(); ++n) {
    if (keep[n] > 1) throw_input_error(str(name, ", keep[", n, "]"), str(int(keep[n]), " is not 0 or 1"));
    if (anchors[n] < 0 || anchors[n] >= context_length) {
      throw_input_error(str(name, ", anchor[", n, "]"), str(anchors[n], " is outside [0, S = ", context_length, ")"));
    }
    if (keep[n] == 0) continue;
    if (anchors[n] <= previous) {
      throw_input_error(str(name, ", anchor[", n, "]"),
                        str(anchors[n], " is not greater than the previous kept anchor ", previous,
                            " (kept anchors must be strictly increasing)"));
    }
    previous = anchors[n];
  }
}

}  // namespace dflash
