// Where a step backend reads the frozen E and W_lm (SPEC §2) from: the target's checkpoint
// (distributed/weights/target_tensors.hpp) or tensors already in memory (tests, goldens).
//
// Why a source and not the tensors: the reference computes with E and W_lm in double and loads them
// whole (load_frozen_weights), but a device backend keeps its own bf16 copy and reads them a piece
// at a time (kFrozenPieceElements), so that the host never holds 2 V H doubles for it (20 GB a rank
// at full scale, all ranks of a node at once, at the start's peak).
#pragma once

#include <cstdint>
#include <span>

#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

enum class FrozenTensor { embed_tokens, lm_head };

// Elements a piecewise reader asks for at once: 8 MiB of doubles.
inline constexpr std::int64_t kFrozenPieceElements = std::int64_t(1) << 20;

class FrozenWeightSource {
 public:
  virtual ~FrozenWeightSource() = default;
  // Elements [first, first + out.size()) of E or W_lm ([vocab_size, hidden_size] of the config the
  // source was made for, C order) into out, each finite: a non-finite one is an InputError naming
  // where it is. The range lies inside the tensor (the caller's contract).
  virtual void read(FrozenTensor which, std::int64_t first, std::span<double> out) const = 0;
};

// Over tensors in memory, which must outlive it.
class FrozenWeightsInMemory final : public FrozenWeightSource {
 public:
  explicit FrozenWeightsInMemory(const FrozenWeights<double>& frozen) : frozen_(frozen) {}
  void read(FrozenTensor which, std::int64_t first, std::span<double> out) const override;

 private:
  const FrozenWeights<double>& frozen_;
};

// Both tensors whole in `tracker` (category frozen), each read in pieces of kFrozenPieceElements
// straight into its place.
FrozenWeights<double> load_frozen_weights(MemoryTracker& tracker, const DrafterConfig& config,
                                          const FrozenWeightSource& source);

}  // namespace dflash
