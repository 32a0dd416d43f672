// The global batch of one optimizer step and its order (TRAINING §11). The step's sequences are
// numbered g = 0 ... global - 1 in data order; with R ranks and U micro-steps, b = global / (R U)
// sequences per rank per micro-step, and sequence g runs at micro-step u = g / (R b) on rank
// r = (g mod R b) / b. g is also the `seq` of the anchor and dropout RNG streams (SPEC §4, §6), so
// the step is the same training step whatever R and U are.
#pragma once

#include <cstdint>
#include <vector>

#include "distributed/training_config.hpp"

namespace dflash {

struct GlobalBatchSlot {
  std::int64_t micro_step = 0;  // u
  int rank = 0;                 // r
};

class GlobalBatchLayout {
 public:
  // InputError naming the three numbers when global is not a multiple of R U.
  GlobalBatchLayout(std::int64_t global_sequences, int ranks, std::int64_t micro_steps);
  static GlobalBatchLayout of(const TrainingConfig& config, int ranks) {
    return GlobalBatchLayout(config.global_batch_sequences, ranks, config.micro_steps);
  }

  std::int64_t global_sequences() const { return global_; }
  int ranks() const { return ranks_; }
  std::int64_t micro_steps() const { return micro_steps_; }
  std::int64_t per_rank_micro_step() const { return per_rank_; }  // b

  GlobalBatchSlot slot_of(std::int64_t g) const;
  // The global indices rank r processes, micro-step by micro-step, ascending: u R b + r b + j.
  std::vector<std::int64_t> sequences_of_rank(int rank) const;

 private:
  std::int64_t global_, micro_steps_, per_rank_;
  int ranks_;
};

}  // namespace dflash
