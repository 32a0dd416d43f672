#include "distributed/global_batch.hpp"

#include "io/errors.hpp"

namespace dflash {

GlobalBatchLayout::GlobalBatchLayout(std::int64_t global_sequences, int ranks, std::int64_t micro_steps)
    : global_(global_sequences), micro_steps_(micro_steps), per_rank_(0), ranks_(ranks) {
  if (ranks < 1) throw_input_error("world size", str(ranks, " ranks: at least 1 is needed"));
  if (micro_steps < 1) throw_input_error("micro_steps", str(micro_steps, " must be at least 1"));
  if (global_sequences < 1 || global_sequences % (std::int64_t(ranks) * micro_steps) != 0) {
    throw_input_error("global_batch_sequences",
                      str("global_batch_sequences = ", global_sequences,
                          " is not a positive multiple of R x U = ", ranks, " ranks x ", micro_steps,
                          " micro_steps (TRAINING §11: b = global / (R U) "
                          "sequences per rank per micro-step must be a whole number)"));
  }
  per_rank_ = global_sequences / (std::int64_t(ranks) * micro_steps);
}

GlobalBatchSlot GlobalBatchLayout::slot_of(std::int64_t g) const {
  if (g < 0 || g >= global_) throw_input_error("global sequence index", str(g, " is outside [0, ", global_, ")"));
  const std::int64_t per_micro_step = std::int64_t(ranks_) * per_rank_;  // R b
  return {g / per_micro_step, static_cast<int>((g % per_micro_step) / per_rank_)};
}

std::vector<std::int64_t> GlobalBatchLayout::sequences_of_rank(int rank) const {
  if (rank < 0 || rank >= ranks_) throw_input_error("rank", str(rank, " is outside [0, ", ranks_, ")"));
  std::vector<std::int64_t> g;
  for (std::int64_t u = 0; u < micro_steps_; ++u) {
    for (std::int64_t j = 0; j < per_rank_; ++j) g.push_back(u * ranks_ * per_rank_ + rank * per_rank_ + j);
  }
  return g;
}

}  // namespace dflash
