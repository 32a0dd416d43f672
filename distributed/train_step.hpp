// One optimizer step of the reference backend on R ranks (TRAINING §11–§13): the rank's sequences
// of the global batch, forward and backward of each (reference/drafter.hpp) with anchors and
// dropout drawn for the global index g, W all-reduced before any backward, gradients summed over
// sequences, micro-steps and ranks (reduce-scatter under ZeRO-1, all-reduce under ZeRO-0, in
// buckets, each issued as soon as the backward of the rank's last sequence has finished it:
// gradient_reduction.hpp), the non-finite rule, global-norm clipping and AdamW on the rank's part
// of the flat vector, and the updated parameters all-gathered into every rank's working copy.
//
// Every rank calls train_step with the same config and its own sequences; the metrics it returns
// are the global ones, equal on every rank.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/communicator.hpp"
#include "distributed/flat_parameters.hpp"
#include "distributed/global_batch.hpp"
#include "distributed/optimizer_state.hpp"
#include "distributed/rank_sequences.hpp"
#include "distributed/training_config.hpp"
#include "planner/parallel_layout.hpp"
#include "reference/drafter.hpp"

namespace dflash {

// What one rank keeps from step to step.
struct TrainingState {
  DrafterParameters<double> params;  // the working copy, whole on every rank (MemoryCategory::parameters)
  OptimizerState optimizer;
};

// The parameters and a fresh optimizer state for this rank (step 0).
TrainingState make_training_state(MemoryTracker& tracker, const DrafterConfig& config, const TrainingConfig& training,
                                  const Communicator& comm, DrafterParameters<double> initial);

struct TrainStepOptions {
  std::int64_t bucket_bytes = kDefaultBucketBytes;  // gradient communication bucket (the plan's)
  std::string last_good_checkpoint = "none";        // named by the non-finite error (§12)
  const DropoutObserver* dropout_observer = nullptr;
  // Each bucket's sum over ranks issued as soon as the backward has finished it (the default), or
  // every bucket after the backward, in the same order: the same collectives on the same data, so
  // bitwise the same results (what the tests hold the overlap to).
  bool reduce_during_backward = true;
};

// One sequence's blocks as the step saw them: keep flags [N] (kappa), w01 [T] and hits [T] (1 where
// w01 = 1 and argmax z = y, the loss head's own argmax: lowest index on ties), rows i = n B + k.
struct SequenceHits {
  std::vector<std::uint8_t> keep;
  std::vector<std::uint8_t> labelled;
  std::vector<std::uint8_t> hits;
};

// The step's metrics (§17's per-step fields that the step itself knows), global over all ranks.
struct StepMetrics {
  std::int64_t step = 0;            // t, the step just taken (0-based)
  double loss = 0, ce = 0, kl = 0;  // over W (SPEC §5)
  double accuracy = 0;              // sum w01 [argmax z = y] / sum w01 (0 when no labelled row)
  double weight_sum = 0;            // W
  double lr = 0;                    // lr_t
  double grad_norm = 0;             // n, before clipping
  bool clipped = false;
  std::int64_t tokens = 0;  // block tokens with w01 = 1
  // This rank's sequences (not summed over ranks), in the order the step was given them: what
  // the block statistics (TRAINING §17) need, from the step's own loss head.
  std::vector<SequenceHits> sequence_hits;
};

// §12's non-finite rule: thrown on every rank, nothing applied anywhere. The message names the
// step, the (lowest) rank that saw it, the first offending gradient tensor in canonical order
// ("loss" when only the loss is) and the last good checkpoint. rank() is -1 when every rank's own
// values were finite and only a reduced one (the summed loss, the gradient norm) overflowed.
class NonFiniteStepError : public std::runtime_error {
 public:
  NonFiniteStepError(std::int64_t step, int rank, std::string tensor, const std::string& message)
      : std::runtime_error(message), step_(step), rank_(rank), tensor_(std::move(tensor)) {}
  std::int64_t step() const { return step_; }
  int rank() const { return rank_; }
  const std::string& tensor() const { return tensor_; }

 private:
  std::int64_t step_;
  int rank_;
  std::string tensor_;
};

// The optimizer half of a step (§12), from gradients already summed over ranks (this rank's part of
// `grads` is read; under ZeRO-1 only the shard holds sums): the global norm n (ZeRO-1 all-reduces
// the shards' squares), the clipping coefficient, lr_t and AdamW on the rank's master weights and
// moments; step + 1. A non-finite n throws NonFiniteStepError before anything is changed.
struct OptimizerStepResult {
  double lr = 0;
  double grad_norm = 0;  // before clipping
  bool clipped = false;
};
OptimizerStepResult apply_optimizer_step(Communicator& comm, const FlatLayout& layout, const TrainingConfig& training,
                                         OptimizerState& state, const DrafterParameters<double>& grads,
                                         const std::string& last_good_checkpoint);

// Refuses (InputError on every rank, naming the ranks that differ) unless every rank of `comm`
// holds the same drafter and training config. Call once at start, before the first step.
void require_same_config(Communicator& comm, const DrafterConfig& config, const TrainingConfig& training);

// One optimizer step t = state.optimizer.step. `sequences` must be exactly this rank's share of
// the global batch (GlobalBatchLayout::sequences_of_rank), in any grouping; otherwise InputError.
StepMetrics train_step(MemoryTracker& tracker, Communicator& comm, const DrafterConfig& config,
                       const TrainingConfig& training, const FrozenWeights<double>& frozen, TrainingState& state,
                       std::span<const RankSequences> sequences, const TrainStepOptions& options = {});

}  // namespace dflash
