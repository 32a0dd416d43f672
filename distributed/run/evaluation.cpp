#include "distributed/run/evaluation.hpp"

#include <limits>

#include "common/dropout_rng.hpp"
#include "io/errors.hpp"

namespace dflash {

nlohmann::json eval_record_json(const EvalRecord& r) {
  nlohmann::json j = {{"sequences", r.sequences}};
  write_record_statistics(j, r);
  return j;
}

std::uint64_t eval_record_line_bytes_at_most(std::int64_t block_size) {
  EvalRecord r;
  static_cast<RecordStatistics&>(r) = longest_record_statistics(block_size);
  r.sequences = std::numeric_limits<std::int64_t>::min();
  return eval_record_json(r).dump().size() + 1;
}

void validate_eval_set(const FeatureDataset& eval) {
  if (eval.num_sequences() > std::int64_t(kMaxSequenceIndex)) {
    throw_input_error("--eval-data", str(eval.source(), " holds ", eval.num_sequences(), " sequences; at most 2^20 = ",
                                         kMaxSequenceIndex, " (the sequence index of the RNG streams, SPEC §6)"));
  }
}

std::vector<std::int64_t> eval_sequences_of_rank(std::int64_t n, int rank, int ranks) {
  std::vector<std::int64_t> mine;
  for (std::int64_t i = rank; i < n; i += ranks) mine.push_back(i);
  return mine;
}

EvalSums::EvalSums(std::int64_t block_size)
    : block_size_(block_size), values_(kScalars + BlockStatistics(block_size).packed().size(), 0.0) {}

void EvalSums::add(const SequenceEvaluation& s, bool truncated) {
  values_[0] += s.stats.loss;
  values_[1] += s.stats.ce;
  values_[2] += s.stats.kl;
  values_[3] += s.weight_sum;
  values_[4] += double(s.stats.correct);
  values_[5] += double(s.stats.valid_rows);
  values_[6] += 1;
  values_[7] += truncated ? 1 : 0;
  const std::vector<double> blocks = s.blocks.packed();
  for (std::size_t k = 0; k < blocks.size(); ++k) values_[kScalars + k] += blocks[k];
}

EvalRecord EvalSums::record(std::int64_t step) const {
  const BlockStatistics blocks =
      BlockStatistics::unpacked(std::vector<double>(values_.begin() + kScalars, values_.end()), block_size_);
  EvalRecord r;
  r.step = step;
  r.weight_sum = values_[3];
  if (r.weight_sum > 0) {
    r.loss = values_[0] / r.weight_sum;
    r.ce = values_[1] / r.weight_sum;
    r.kl = values_[2] / r.weight_sum;
  }
  r.accuracy = values_[5] > 0 ? values_[4] / values_[5] : 0.0;
  r.tokens = std::int64_t(values_[5]);
  r.sequences = std::int64_t(values_[6]);
  r.truncated_sequences = std::int64_t(values_[7]);
  r.accuracy_by_position = blocks.accuracy_by_position();
  r.acceptance_length = blocks.acceptance_length();
  return r;
}

EvalRecord evaluate(Communicator& comm, StepBackend& backend, const DrafterConfig& config,
                    const TrainingConfig& training, const FeatureDataset& eval, std::int64_t step) {
  DrafterConfig no_dropout = config;
  no_dropout.attention_dropout = 0;
  no_dropout.hidden_dropout = 0;
  EvalSums sums(config.block_size);
  for (const std::int64_t i : eval_sequences_of_rank(eval.num_sequences(), comm.rank(), comm.size())) {
    MemoryTracker scratch;
    const DrafterStepOptions options = drafter_step_options(no_dropout, std::uint32_t(step), std::uint32_t(i));
    if (backend.reads_features_as_bf16()) {  // as the steps read them: the host plan's bytes
      const FeatureDataset::Bf16Batch q = eval.sequence_bf16_batch(scratch, i, training.max_context);
      sums.add(backend.forward_statistics(no_dropout, q.batch, options, &q.features), q.truncated);
    } else {
      const FeatureDataset::Batch q = eval.sequence_batch(scratch, i, training.max_context);
      sums.add(backend.forward_statistics(no_dropout, q.batch, options), q.truncated);
    }
  }
  all_reduce_sum(comm, sums.values());
  return sums.record(step);
}

}  // namespace dflash
