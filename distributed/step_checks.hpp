// What a training step does the same on every backend (TRAINING §11–§12), shared by the reference
// step (train_step.cpp) and the CUDA step (cuda_train_step.cpp): the check of the rank's share of
// the global batch, the non-finite rule with its one message, the metrics.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "distributed/communicator.hpp"
#include "distributed/flat_parameters.hpp"
#include "distributed/global_batch.hpp"
#include "distributed/train_step.hpp"

namespace dflash {

// The rank's global indices must be exactly its share of the global batch (TRAINING §11); each
// batch without explicit anchors and not longer than max_context. InputError otherwise.
void check_rank_sequences(const GlobalBatchLayout& layout, int rank, const TrainingConfig& training,
                          std::span<const RankSequences> sequences);

// Where the rank saw its first non-finite value: kind 0 none, 1 the loss, 2 a gradient (tensor, element).
struct NonFiniteReport {
  std::int64_t kind = 0, tensor = 0, element = 0;
};

// Throws §12's NonFiniteStepError (rank -1: after the reduction, on every rank).
[[noreturn]] void throw_non_finite(std::int64_t step, int rank, const std::string& tensor, const std::string& what,
                                   const std::string& last_good_checkpoint);

// Every rank's report (a host collective on `comm`); every rank throws the same error for the
// lowest rank that saw one.
void require_finite_everywhere(Communicator& comm, const FlatLayout& layout, std::int64_t step,
                               const NonFiniteReport& mine, const std::string& last_good_checkpoint);

// The step's global metrics from the all-reduced sums (loss, ce, kl) and counts (correct,
// labelled rows), W and what the optimizer applied.
StepMetrics step_metrics(std::int64_t step, const double (&sums)[3], const std::int64_t (&counts)[2], double weight_sum,
                         double lr, double grad_norm, bool clipped);

}  // namespace dflash
