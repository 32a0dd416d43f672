// One rank's optimizer state (TRAINING §12, §13): the master weights and the AdamW moments of the
// part of the flat vector the rank updates (its ZeRO-1 shard, or everything under ZeRO-0), and the
// step count. Everything is double in the reference (the working parameters are double too, and
// equal the master weights after every step). Allocated in MemoryCategory::optimizer.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "distributed/communicator.hpp"
#include "distributed/flat_parameters.hpp"
#include "reference/tensor.hpp"

namespace dflash {

struct OptimizerState {
  std::int64_t step = 0;      // optimizer steps completed (Adam's t; the next step is t = step)
  std::int64_t offset = 0;    // first flat element of this rank's part
  Tensor<double> master;      // [shard] master weights (padding: 0)
  Tensor<double> exp_avg;     // [shard] AdamW m
  Tensor<double> exp_avg_sq;  // [shard] AdamW v
};

// A fresh state for this rank: master copied from `params`, moments 0, step 0.
OptimizerState make_optimizer_state(MemoryTracker& tracker, const FlatLayout& layout, int rank,
                                    const DrafterParameters<double>& params);
// The same with master from flat_values(first, out), which fills out with the flat elements
// [first, first + out.size()) (0 past P): called once, for this rank's part alone, so that a rank
// that keeps only its part never makes the whole parameters (seeded_flat_values).
OptimizerState make_optimizer_state(MemoryTracker& tracker, const FlatLayout& layout, int rank,
                                    const std::function<void(std::int64_t first, std::span<double> out)>& flat_values);

// A state restored from full flat vectors (a checkpoint, which stores them whole so that a run may
// resume on another R, §15): this rank's part of each, and the step count. Each span holds P values.
OptimizerState restore_optimizer_state(MemoryTracker& tracker, const FlatLayout& layout, int rank,
                                       std::span<const double> master, std::span<const double> exp_avg,
                                       std::span<const double> exp_avg_sq, std::int64_t step);
// The same from the values [first, first + n) of each flat vector (n = the spans' common size),
// which must hold every value of the rank's part: a checkpoint read for one rank (save_restore.hpp's
// FlatSlice), without the 3 P doubles of the whole vectors.
OptimizerState restore_optimizer_part(MemoryTracker& tracker, const FlatLayout& layout, int rank, std::int64_t first,
                                      std::span<const double> master, std::span<const double> exp_avg,
                                      std::span<const double> exp_avg_sq, std::int64_t step);

// The whole flat vector (P values) of one of the state's tensors, gathered from every rank's part
// (a collective: every rank calls it; every rank receives the result). For checkpoints and tests.
std::vector<double> gather_full(Communicator& comm, const FlatLayout& layout, const Tensor<double>& part);

}  // namespace dflash
