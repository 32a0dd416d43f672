// Held-out statistics (TRAINING §17, `--eval-data DIR --eval-every N`): after every N-th optimizer
// step, the step's statistics on a held-out feature set with no gradients and no dropout, one JSON
// object per evaluation in <run>/eval.jsonl. Every sequence of the set is evaluated, rank r taking
// sequences i = r, r + R, ...; anchors are sampled for (step, seq = i), so the result does not
// depend on R (up to the order of the sums over ranks). Loss, ce and kl are over the whole set's
// W, as in SPEC §5. The forward is the backend's (StepBackend::forward_statistics): the reference
// in double, or the CUDA step's forward on the device, so that evaluating at full scale costs a
// fraction of a training step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/communicator.hpp"
#include "distributed/data/feature_dataset.hpp"
#include "distributed/metrics/step_record.hpp"
#include "distributed/run/step_backend.hpp"
#include "distributed/training_config.hpp"

namespace dflash {

// step: after optimizer step t; the statistics over the whole held-out set.
struct EvalRecord : RecordStatistics {
  std::int64_t sequences = 0;
};

nlohmann::json eval_record_json(const EvalRecord& r);
// The bytes of one eval.jsonl line at the most (step_record.hpp's longest statistics).
std::uint64_t eval_record_line_bytes_at_most(std::int64_t block_size);

// Refuses (InputError naming --eval-data) a set of more than 2^20 sequences: seq indexes the RNG
// streams (SPEC §6).
void validate_eval_set(const FeatureDataset& eval);

// The held-out sequences rank `rank` of `ranks` evaluates, ascending: i = rank, rank + ranks, ... < n.
std::vector<std::int64_t> eval_sequences_of_rank(std::int64_t n, int rank, int ranks);

// What one rank adds up over its sequences, in one flat vector that the ranks sum (all_reduce_sum):
// w l, w CE, w KL, W, correct, labelled rows, sequences, truncated sequences, then the block
// statistics (BlockStatistics::packed).
class EvalSums {
 public:
  explicit EvalSums(std::int64_t block_size);
  void add(const SequenceEvaluation& s, bool truncated);
  std::span<double> values() { return values_; }
  // The record of the summed values: loss, ce, kl over W (0 when W = 0), accuracy over the labelled
  // rows (0 when none), the block statistics.
  EvalRecord record(std::int64_t step) const;

 private:
  static constexpr std::size_t kScalars = 8;
  std::int64_t block_size_;
  std::vector<double> values_;
};

// Every rank calls it (a collective over comm). `backend` evaluates with the parameters its next
// step computes with.
EvalRecord evaluate(Communicator& comm, StepBackend& backend, const DrafterConfig& config,
                    const TrainingConfig& training, const FeatureDataset& eval, std::int64_t step);

}  // namespace dflash
