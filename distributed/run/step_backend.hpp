// One rank's training state and step on a backend, as the run loop (training_run.cpp) drives it:
// the reference (train_step.hpp: double, host memory) or CUDA (cuda_step_backend.hpp: fp32 master
// and moments, bf16 working copy, device memory). Checkpoints go through full flat vectors of the
// master weights and moments, so both backends write one format (in their master precision,
// TRAINING §15) and a run may resume on either backend and on any R.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "distributed/metrics/block_statistics.hpp"
#include "distributed/optimizer_part.hpp"
#include "distributed/train_step.hpp"
#include "io/safetensors_dtype.hpp"
#include "reference/frozen_weight_source.hpp"

namespace dflash {

// One held-out batch's statistics from a forward alone (evaluation, TRAINING §17).
struct SequenceEvaluation {
  LossHeadStats<double> stats;  // over W = 1: loss, ce, kl are the sums of w l, w CE, w KL; correct, valid_rows
  double weight_sum = 0;        // the batch's W (sum of w over its rows)
  BlockStatistics blocks;       // from the forward's own loss-head hits
};

class StepBackend {
 public:
  virtual ~StepBackend() = default;
  virtual std::int64_t completed_steps() const = 0;  // Adam's step count
  // The forward alone of `batch` with the parameters the next step computes with, `config` and
  // `options` as given (evaluation passes dropout off), the loss over W = 1: no gradient is made.
  // F and G are `bf16`'s when given (the batch's own then empty: RankSequences::bf16_features).
  // Reference: drafter_forward in double. CUDA: cuda_drafter_forward_sequences on the bf16 working
  // copy (device memory within the training step's plan).
  virtual SequenceEvaluation forward_statistics(const DrafterConfig& config, const DrafterBatch<double>& batch,
                                                const DrafterStepOptions& options,
                                                const Bf16Features* bf16 = nullptr) = 0;
  // One optimizer step on this rank's share of the global batch (every rank calls it).
  virtual StepMetrics step(std::span<const RankSequences> sequences, const TrainStepOptions& options) = 0;
  // Whether the step reads a sequence's F and G only as bf16 (CUDA: its uploads round them), so
  // that the run may hand them over rounded (RankSequences::bf16_features) and hold a quarter of
  // their bytes until each one's turn. The reference computes with them in double: false.
  virtual bool reads_features_as_bf16() const { return false; }
  // One of master weights, exp_avg, exp_avg_sq as a full flat vector of P values in the master
  // precision (a collective: every rank calls it, for the parts in the same order), on the ranks
  // that ask (to_this_rank: the one that writes the checkpoint); the others get an empty vector
  // (P values, 6.9 GB a rank at full scale, never read back or kept).
  virtual FlatValues gather_optimizer(OptimizerPart part, bool to_this_rank) = 0;
  virtual safetensors::Dtype master_dtype() const = 0;  // F64 reference, F32 CUDA
  // Peak bytes per category (SPEC §8 names) since reset_peaks: the host's or the device's.
  virtual std::map<std::string, std::int64_t> peak_bytes() const = 0;
  virtual void reset_peaks() = 0;
};

// Peak bytes of every category of a tracker, by SPEC §8 name.
std::map<std::string, std::int64_t> peak_bytes_of(const MemoryTracker& tracker);

// The reference backend over `state` (make_training_state or a restored one); `tracker` counts its
// memory and must outlive it, as must comm, config, training and frozen.
std::unique_ptr<StepBackend> make_reference_step_backend(MemoryTracker& tracker, Communicator& comm,
                                                         const DrafterConfig& config, const TrainingConfig& training,
                                                         const FrozenWeights<double>& frozen, TrainingState state);
// The same over frozen weights it reads whole from `source` (load_frozen_weights, into `tracker`)
// and keeps: the reference computes with them in double.
std::unique_ptr<StepBackend> make_reference_step_backend(MemoryTracker& tracker, Communicator& comm,
                                                         const DrafterConfig& config, const TrainingConfig& training,
                                                         const FrozenWeightSource& source, TrainingState state);

}  // namespace dflash
