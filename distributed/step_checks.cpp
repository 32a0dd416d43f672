#include "distributed/step_checks.hpp"

#include <algorithm>
#include <vector>

#include "io/errors.hpp"

namespace dflash {

void check_rank_sequences(const GlobalBatchLayout& layout, int rank, const TrainingConfig& training,
                          std::span<const RankSequences> sequences) {
  std::vector<std::int64_t> got;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const RankSequences& s = sequences[i];
    if (s.batch == nullptr) throw_input_error(str("sequences[", i, "]"), "has no batch");
    if (s.batch->anchors) {
      throw_input_error(str("sequences[", i, "]"), "holds explicit anchors; a training step samples them from g");
    }
    if (s.batch->context_length() > training.max_context) {
      throw_input_error(str("sequences[", i, "]"), str("context length ", s.batch->context_length(),
                                                       " exceeds max_context = ", training.max_context));
    }
    for (std::int64_t b = 0; b < s.batch->num_sequences(); ++b) got.push_back(s.first_global_index + b);
  }
  std::sort(got.begin(), got.end());
  const std::vector<std::int64_t> want = layout.sequences_of_rank(rank);
  if (got != want) {
    auto list = [](const std::vector<std::int64_t>& v) {
      std::string s;
      for (std::size_t i = 0; i < v.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + (v.size() > 16 ? ", ..." : "");
    };
    throw_input_error("rank sequences", str("rank ", rank, " got global indices [", list(got), "] but its share of a ",
                                            layout.global_sequences(), "-sequence batch over ", layout.ranks(),
                                            " ranks and ", layout.micro_steps(), " micro-steps is [", list(want), "]"));
  }
}

[[noreturn]] void throw_non_finite(std::int64_t step, int rank, const std::string& tensor, const std::string& what,
                                   const std::string& last_good_checkpoint) {
  throw NonFiniteStepError(
      step, rank, tensor,
      str("non-finite ", what, " at step ", step,
          rank < 0 ? " after the reduction (every rank)" : str(" on rank ", rank), ": first offending tensor ", tensor,
          "; the step was not applied on any rank; "
          "last good checkpoint: ",
          last_good_checkpoint));
}

// Every rank's report; every rank throws the same error for the lowest rank that saw one.
void require_finite_everywhere(Communicator& comm, const FlatLayout& layout, std::int64_t step,
                               const NonFiniteReport& mine, const std::string& last_good_checkpoint) {
  std::vector<std::int64_t> all(3 * static_cast<std::size_t>(comm.size()));
  const std::int64_t packed[3] = {mine.kind, mine.tensor, mine.element};
  comm.all_gather(packed, all.data(), 3, CommType::i64);
  for (int r = 0; r < comm.size(); ++r) {
    const std::int64_t* rep = all.data() + 3 * r;
    if (rep[0] == 1) throw_non_finite(step, r, "loss", "loss", last_good_checkpoint);
    if (rep[0] == 2) {
      const std::string& name = layout.tensors().at(static_cast<std::size_t>(rep[1])).name;
      throw_non_finite(step, r, name, str("gradient (", name, " element ", rep[2], ")"), last_good_checkpoint);
    }
  }
}

StepMetrics step_metrics(std::int64_t step, const double (&sums)[3], const std::int64_t (&counts)[2], double weight_sum,
                         double lr, double grad_norm, bool clipped) {
  StepMetrics m;
  m.step = step;
  m.loss = sums[0];
  m.ce = sums[1];
  m.kl = sums[2];
  m.tokens = counts[1];
  m.accuracy = counts[1] == 0 ? 0.0 : double(counts[0]) / double(counts[1]);
  m.weight_sum = weight_sum;
  m.lr = lr;
  m.grad_norm = grad_norm;
  m.clipped = clipped;
  return m;
}

}  // namespace dflash
