#include "distributed/run/evaluation.hpp"

#include "common/dropout_rng.hpp"
#include "distributed/metrics/block_statistics.hpp"
#include "reference/drafter.hpp"
#include "reference/errors.hpp"

namespace dflash {

nlohmann::json eval_record_json(const EvalRecord& r) {
  nlohmann::json j = {{"sequences", r.sequences}};
  write_record_statistics(j, r);
  return j;
}

void validate_eval_set(const FeatureDataset& eval) {
  if (eval.num_sequences() > std::int64_t(kMaxSequenceIndex)) {
    throw_input_error("--eval-data", str(eval.source(), " holds ", eval.num_sequences(), " sequences; at most 2^20 = ",
                                         kMaxSequenceIndex, " (the sequence index of the RNG streams, SPEC §6)"));
  }
}

EvalRecord evaluate(Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                    const DrafterParameters<double>& params, const FrozenWeights<double>& frozen,
                    const FeatureDataset& eval, std::int64_t step) {
  DrafterConfig no_dropout = config;
  no_dropout.attention_dropout = 0;
  no_dropout.hidden_dropout = 0;
  // Sums: w l, w ce, w kl, W, correct, labelled, sequences, truncated; then the block statistics.
  std::vector<double> sums(8, 0.0);
  BlockStatistics blocks(config.block_size);
  for (std::int64_t i = comm.rank(); i < eval.num_sequences(); i += comm.size()) {
    MemoryTracker scratch;
    const FeatureSequence q = eval.sequence(i, training.max_context);
    const DrafterBatch<double> batch = drafter_batch_of(scratch, q, config.feature_width(), config.hidden_size);
    const DrafterStepOptions options = drafter_step_options(no_dropout, std::uint32_t(step), std::uint32_t(i));
    // W = 1: the loss head returns the unnormalised sums, divided by the set's W below.
    const DrafterOutputs<double> out = drafter_forward(scratch, no_dropout, params, frozen, batch, options, std::optional<double>(1.0));
    sums[0] += out.stats.loss;
    sums[1] += out.stats.ce;
    sums[2] += out.stats.kl;
    for (std::int64_t e = 0; e < out.weights.numel(); ++e) sums[3] += out.weights[e];
    sums[4] += double(out.stats.correct);
    sums[5] += double(out.stats.valid_rows);
    sums[6] += 1;
    sums[7] += q.truncated ? 1 : 0;
    add_block_statistics(blocks, config.block_size, out);
  }
  const std::vector<double> packed = blocks.packed();
  sums.insert(sums.end(), packed.begin(), packed.end());
  all_reduce_sum(comm, sums);
  blocks = BlockStatistics::unpacked(std::vector<double>(sums.begin() + 8, sums.end()), config.block_size);

  EvalRecord r;
  r.step = step;
  r.weight_sum = sums[3];
  if (r.weight_sum > 0) {
    r.loss = sums[0] / r.weight_sum;
    r.ce = sums[1] / r.weight_sum;
    r.kl = sums[2] / r.weight_sum;
  }
  r.accuracy = sums[5] > 0 ? sums[4] / sums[5] : 0.0;
  r.tokens = std::int64_t(sums[5]);
  r.sequences = std::int64_t(sums[6]);
  r.truncated_sequences = std::int64_t(sums[7]);
  r.accuracy_by_position = blocks.accuracy_by_position();
  r.acceptance_length = blocks.acceptance_length();
  return r;
}

}  // namespace dflash
