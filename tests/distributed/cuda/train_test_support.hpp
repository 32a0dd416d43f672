// What the tests of the CUDA training step (GPU and CPU backends) share: the tiny problem of
// training_problem.hpp (P = 1056, dropout on, clipping active), one batch of equal-length sequences
// per step (a rank's share of the global batch in one DrafterBatch), and the state's host views.
#pragma once

#include <array>
#include <vector>

#include "distributed/cuda/training_state.hpp"
#include "tests/distributed/training_problem.hpp"

namespace dflash::testing {

inline constexpr std::int64_t kCudaSteps = 3;
inline constexpr std::int64_t kCudaGlobalBatch = 8;  // R = 1, 2, 4, 8 divide it
inline constexpr std::int64_t kCudaContext = 12;

// The share of labelled rows whose CUDA hit (argmax z = y) must equal the reference step's. The two
// steps see the same rows (anchors, keep, w01: exactly equal) but the CUDA one computes the logits
// from the bf16 working copy with bf16 activations (relative error about 2^-8 per rounding) and
// its parameters drift from the double reference's over the steps; an argmax can differ only on
// a row whose two largest logits are that close. On the tiny problem (V = 24, about 150 labelled
// rows over three steps) such near-ties are rare: 5% leaves room for a few of them, while hits of
// the wrong rows (a shifted or reordered download) agree on far fewer (most rows miss, and the
// hits land elsewhere).
inline constexpr double kHitAgreement = 0.95;

// The host side of the problem: config, frozen weights, initial parameters (as training_problem.hpp's TinyTrainer).
struct CudaTinyProblem {
  DrafterConfig config = tiny_drafter_config();
  TrainingConfig training;
  MemoryTracker tracker;
  FrozenWeights<double> frozen;
  DrafterParameters<double> initial;

  explicit CudaTinyProblem(int zero_stage)
      : training(tiny_training_config(kCudaGlobalBatch, 1, zero_stage)),
        frozen(init_frozen_weights<double>(tracker, config, 5)),
        initial(init_drafter_parameters<double>(tracker, config, 3, 0.2)) {}

  // The fresh host optimizer state of `rank` of `ranks`.
  OptimizerState initial_state(int ranks, int rank) {
    return make_optimizer_state(tracker, FlatLayout(config, ranks, training.zero_stage), rank, initial);
  }
  // The global batch of step t (sequences g = 0 .. kCudaGlobalBatch - 1, one context length).
  DrafterBatch<double> global_batch(std::int64_t t) {
    return make_drafter_batch<double>(
        tracker, config,
        {.sequences = kCudaGlobalBatch, .context_length = kCudaContext, .seed = std::uint64_t(50 + t)});
  }
  // The first global index of rank r's share (U = 1).
  static std::int64_t first_of(int ranks, int rank) { return rank * (kCudaGlobalBatch / ranks); }
  // Rank r's share of it (b = global / R consecutive sequences from r b, U = 1), as its own batch:
  // the global batch itself on one rank.
  DrafterBatch<double> share(std::int64_t t, int ranks, int rank) {
    return ranks == 1 ? global_batch(t) : rank_batch(t, ranks, rank);
  }
  // Rank r's share of it (b = global / R consecutive sequences from r b, U = 1), as its own batch.
  DrafterBatch<double> rank_batch(std::int64_t t, int ranks, int rank) {
    const std::int64_t b = kCudaGlobalBatch / ranks;
    const DrafterBatch<double> all = global_batch(t);
    DrafterBatch<double> mine =
        make_drafter_batch<double>(tracker, config, {.sequences = b, .context_length = kCudaContext, .seed = 1});
    auto copy_rows = [&](const auto& from, auto& to) {
      const std::int64_t per = from.numel() / kCudaGlobalBatch;
      std::copy_n(from.data() + rank * b * per, b * per, to.data());
    };
    copy_rows(all.tokens, mine.tokens);
    copy_rows(all.loss_mask, mine.loss_mask);
    copy_rows(all.target_features, mine.target_features);
    copy_rows(all.teacher_hidden, mine.teacher_hidden);
    return mine;
  }
};

// The state's optimizer part and working copy on the host (exact: fp32 and bf16 are doubles).
struct CudaStateSnapshot {
  std::int64_t step = 0;
  std::array<std::vector<double>, 3> full;  // master, exp_avg, exp_avg_sq: P values each
  std::vector<double> working;              // the working copy, canonical order
};

// A collective over the state's ranks under ZeRO-1 (gather_full).
template <class Backend>
CudaStateSnapshot snapshot(DeviceTrainingState<Backend>& state, const DrafterConfig& config) {
  MemoryTracker tracker;
  CudaStateSnapshot s;
  s.step = state.step();
  s.full = {state.gather_full(OptimizerPart::master), state.gather_full(OptimizerPart::exp_avg),
            state.gather_full(OptimizerPart::exp_avg_sq)};
  const DrafterParameters<double> w = state.working_parameters(tracker, config);
  w.for_each([&](const std::string&, const Tensor<double>& t) {
    s.working.insert(s.working.end(), t.values().begin(), t.values().end());
  });
  return s;
}

inline std::vector<double> metrics_vector(const StepMetrics& m) {
  return {double(m.step),    m.loss,          m.ce, m.kl, m.accuracy, m.weight_sum, m.lr, m.grad_norm,
          double(m.clipped), double(m.tokens)};
}

}  // namespace dflash::testing
