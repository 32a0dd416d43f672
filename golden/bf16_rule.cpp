#include "golden/bf16_rule.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "golden/loss_head.hpp"
#include "reference/bf16_emulation.hpp"
#include "reference/bf16_tolerance.hpp"

namespace dflash {

GoldenLossHeadProblems golden_loss_head_problems(MemoryTracker& tracker, const Golden& golden) {
  GoldenLossHeadInputs in = golden_loss_head_inputs(tracker, golden);
  GoldenLossHeadProblems p;
  p.options = golden.config.loss_head_options();
  p.options.lm_head_grad = false;
  if (p.options.policy == LossPolicy::chunk_retain) p.options.policy = LossPolicy::chunk_recompute;
  double device_weight_sum = 0;
  for (std::size_t b = 0; b < in.hidden.size(); ++b) {
    const SequenceBlocks<double>& s = in.blocks[b];
    p.exact.push_back(LossHeadProblem<double>{std::move(in.hidden[b]), std::move(in.teacher[b]),
                                              golden.frozen.lm_head.clone(tracker, MemoryCategory::frozen), s.labels,
                                              s.weights, s.valid, in.weight_sum});
    p.device.push_back(round_to_device_formats(tracker, p.exact.back()));
    device_weight_sum += p.device.back().weight_sum;
  }
  for (LossHeadProblem<double>& d : p.device) d.weight_sum = device_weight_sum;
  return p;
}

GoldenResults loss_head_golden_results(const std::vector<LossHeadResult<double>>& per_sequence, double weight_sum) {
  const auto nseq = static_cast<std::int64_t>(per_sequence.size());
  const std::int64_t T = nseq == 0 ? 0 : per_sequence.front().lse.numel();
  GoldenResults r;
  GoldenTensor& lse = r["output/lse"] = GoldenTensor{{nseq, T}, {}};
  GoldenTensor& token_loss = r["output/token_loss"] = GoldenTensor{{nseq, T}, {}};
  LossHeadStats<double> total;
  for (const LossHeadResult<double>& s : per_sequence) {
    lse.values.insert(lse.values.end(), s.lse.values().begin(), s.lse.values().end());
    token_loss.values.insert(token_loss.values.end(), s.token_loss.values().begin(), s.token_loss.values().end());
    total.merge(s.stats);
  }
  r["output/loss"] = GoldenTensor{{}, {total.loss}};
  r["output/ce"] = GoldenTensor{{}, {total.ce}};
  r["output/kl"] = GoldenTensor{{}, {total.kl}};
  r["output/accuracy"] = GoldenTensor{{}, {total.accuracy()}};
  r["output/weight_sum"] = GoldenTensor{{}, {weight_sum}};
  return r;
}

std::map<std::string, double, std::less<>> bf16_rule_golden_tolerances(MemoryTracker& tracker, const Golden& golden,
                                                                       const GoldenLossHeadProblems& problems) {
  std::vector<LossHeadResult<double>> plain;
  std::int64_t ambiguous = 0;
  for (std::size_t b = 0; b < problems.device.size(); ++b) {
    Bf16Emulation e = hybrid_loss_bf16_emulation(tracker, problems.options, problems.device[b], &problems.exact[b]);
    ambiguous += e.ambiguous_argmax_rows;
    plain.push_back(std::move(e.result));
  }
  const double device_weight_sum = problems.device.empty() ? 0.0 : problems.device.front().weight_sum;
  GoldenOutputs measured{loss_head_golden_results(plain, device_weight_sum), {}};
  for (const auto& [name, t] : measured.tensors) measured.tolerance[name] = std::numeric_limits<double>::infinity();

  std::map<std::string, double, std::less<>> tolerance;
  for (const GoldenCheckRow& row : compare_golden_outputs(golden, measured)) {
    tolerance[row.tensor] = kPlainErrorFactor * row.error + kFp32Floor;
  }
  // Accuracy: counts. The plain computation's changed rows, twice, plus the ambiguous rows, as a
  // relative error of the golden's accuracy (the check's measure; a golden accuracy of 0 cannot
  // express an allowed change: then any is allowed only if some row is ambiguous).
  std::int64_t valid_rows = 0, plain_correct = 0;
  for (const LossHeadResult<double>& s : plain) {
    valid_rows += s.stats.valid_rows;
    plain_correct += s.stats.correct;
  }
  const double golden_accuracy = golden.results.at("output/accuracy").values.at(0);
  const double golden_correct = std::round(golden_accuracy * double(valid_rows));
  const double allowed_rows = kPlainErrorFactor * std::abs(double(plain_correct) - golden_correct) + double(ambiguous);
  tolerance["output/accuracy"] = golden_accuracy > 0
                                     ? allowed_rows / double(valid_rows) / golden_accuracy
                                     : (allowed_rows > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  return tolerance;
}

}  // namespace dflash
