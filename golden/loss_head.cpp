#include "golden/loss_head.hpp"

#include <algorithm>

namespace dflash {

LossHeadTargets<double> GoldenLossHeadInputs::targets(std::size_t b, const FrozenWeights<double>& frozen) const {
  const SequenceBlocks<double>& s = blocks.at(b);
  return LossHeadTargets<double>{&teacher.at(b), &frozen.lm_head, nullptr, s.labels, s.weights, s.valid};
}

GoldenLossHeadInputs golden_loss_head_inputs(MemoryTracker& tracker, const Golden& g) {
  // The drafter step's own preparation (anchors as stored, SPEC §4 labels and weights, teacher
  // rows), so that the loss head sees exactly what it sees inside the step.
  auto prepared = prepare_sequences(g.config, g.batch, g.step_options());
  const std::int64_t T = g.results.at("output/hidden").shape.at(1), H = g.config.hidden_size;
  const std::vector<double>& hidden = g.results.at("output/hidden").values;
  GoldenLossHeadInputs in;
  for (std::int64_t b = 0; b < g.num_sequences(); ++b) {
    auto& s = prepared[static_cast<std::size_t>(b)];
    Tensor<double> y(tracker, MemoryCategory::inputs, {T, H});
    std::copy_n(hidden.begin() + b * T * H, T * H, y.data());
    in.hidden.push_back(std::move(y));
    in.teacher.push_back(gather_teacher_rows(tracker, g.batch, b, s.blocks));
    for (const double w : s.blocks.weights) in.weight_sum += w;
    in.blocks.push_back(std::move(s.blocks));
  }
  return in;
}

GoldenResults reference_loss_head_results(MemoryTracker& tracker, const Golden& g, double* magnitude) {
  const GoldenLossHeadInputs in = golden_loss_head_inputs(tracker, g);
  const std::int64_t nseq = g.num_sequences(), T = in.hidden.at(0).dim(0);
  GoldenResults r;
  r["output/lse"] = GoldenTensor{{nseq, T}, std::vector<double>(static_cast<std::size_t>(nseq * T))};
  r["output/token_loss"] = GoldenTensor{{nseq, T}, std::vector<double>(static_cast<std::size_t>(nseq * T))};
  LossHeadStats<double> total;
  for (std::size_t b = 0; b < in.hidden.size(); ++b) {
    const LossHeadForward<double> f =
        loss_head_forward(tracker, g.config.loss_head_options(), in.hidden[b], in.targets(b, g.frozen), in.weight_sum);
    std::copy_n(f.lse.data(), T, r["output/lse"].values.begin() + static_cast<std::ptrdiff_t>(b) * T);
    std::copy_n(f.token_loss.data(), T, r["output/token_loss"].values.begin() + static_cast<std::ptrdiff_t>(b) * T);
    // Summed in sequence order, as the drafter step sums them.
    total.merge(f.stats);
  }
  r["output/loss"] = GoldenTensor{{}, {total.loss}};
  r["output/ce"] = GoldenTensor{{}, {total.ce}};
  r["output/kl"] = GoldenTensor{{}, {total.kl}};
  r["output/accuracy"] = GoldenTensor{{}, {total.accuracy()}};
  r["output/weight_sum"] = GoldenTensor{{}, {in.weight_sum}};
  if (magnitude != nullptr) *magnitude = total.magnitude;
  return r;
}

}  // namespace dflash
