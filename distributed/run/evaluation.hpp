// Held-out statistics (TRAINING §17, `--eval-data DIR --eval-every N`): after every N-th optimizer
// step, the step's statistics on a held-out feature set with no gradients and no dropout, one JSON
// object per evaluation in <run>/eval.jsonl. Every sequence of the set is evaluated, rank r taking
// sequences i = r, r + R, ...; anchors are sampled for (step, seq = i), so the result does not
// depend on R. Loss, ce and kl are over the whole set's W, as in SPEC §5.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "distributed/communicator.hpp"
#include "distributed/data/feature_dataset.hpp"
#include "distributed/metrics/step_record.hpp"
#include "distributed/training_config.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

// step: after optimizer step t; the statistics over the whole held-out set.
struct EvalRecord : RecordStatistics {
  std::int64_t sequences = 0;
};

nlohmann::json eval_record_json(const EvalRecord& r);

// Refuses (InputError naming --eval-data) a set of more than 2^20 sequences: seq indexes the RNG
// streams (SPEC §6).
void validate_eval_set(const FeatureDataset& eval);

EvalRecord evaluate(Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                    const DrafterParameters<double>& params, const FrozenWeights<double>& frozen,
                    const FeatureDataset& eval, std::int64_t step);

}  // namespace dflash
