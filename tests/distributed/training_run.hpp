// A few optimizer steps of the tiny problem on a communicator, and what they end with: the full
// parameters, master weights and moments (gathered from every rank) and the metrics of each step.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/tolerances.hpp"
#include "distributed/train_step.hpp"
#include "reference/compare.hpp"
#include "tests/distributed/training_problem.hpp"

namespace dflash::testing {

struct TrainingRun {
  std::vector<double> params, master, exp_avg, exp_avg_sq;  // P values each
  std::vector<StepMetrics> metrics;
};

using Unlabelled = std::function<bool(std::int64_t)>;

// `reduce_during_backward`: TrainStepOptions' (false: every bucket after the backward).
inline TrainingRun run_training(Communicator& comm, const TrainingConfig& training, std::int64_t steps,
                                std::int64_t bucket_bytes, const Unlabelled& unlabelled = all_labelled,
                                bool reduce_during_backward = true) {
  require_same_config(comm, tiny_drafter_config(), training);
  TinyTrainer tiny(comm, training);
  const DrafterConfig& config = tiny.config;
  MemoryTracker& tracker = tiny.tracker;
  TrainingState& state = tiny.state;
  const GlobalBatchLayout layout = GlobalBatchLayout::of(training, comm.size());
  TrainingRun run;
  for (std::int64_t t = 0; t < steps; ++t) {
    const std::vector<SequenceData> data =
        load_sequences(tracker, config, t, layout.sequences_of_rank(comm.rank()), unlabelled);
    run.metrics.push_back(train_step(tracker, comm, config, training, tiny.frozen, state, as_rank_sequences(data),
                                     {.bucket_bytes = bucket_bytes, .reduce_during_backward = reduce_during_backward}));
  }
  const FlatLayout flat(config, comm.size(), training.zero_stage);
  run.params.resize(static_cast<std::size_t>(flat.count()));
  read_flat(flat, state.params, 0, run.params);
  run.master = gather_full(comm, flat, state.optimizer.master);
  run.exp_avg = gather_full(comm, flat, state.optimizer.exp_avg);
  run.exp_avg_sq = gather_full(comm, flat, state.optimizer.exp_avg_sq);
  return run;
}

// Tensor by tensor (norm-wise relative error, SPEC §10), and every metric.
inline void expect_same_run(const TrainingRun& want, const TrainingRun& got, const std::string& context) {
  const FlatLayout flat(tiny_drafter_config(), 1, 0);
  const std::pair<const char*, const std::vector<double> TrainingRun::*> fields[] = {
      {"parameters", &TrainingRun::params},
      {"master", &TrainingRun::master},
      {"exp_avg", &TrainingRun::exp_avg},
      {"exp_avg_sq", &TrainingRun::exp_avg_sq}};
  for (const auto& [what, field] : fields) {
    const std::vector<double>& a = got.*field;
    const std::vector<double>& b = want.*field;
    ASSERT_EQ(a.size(), b.size()) << context << " " << what;
    for (const FlatTensor& t : flat.tensors()) {
      const auto at = static_cast<std::size_t>(t.offset), n = static_cast<std::size_t>(t.numel);
      const double err =
          relative_error(std::span<const double>(a).subspan(at, n), std::span<const double>(b).subspan(at, n));
      EXPECT_LE(err, kReferenceTolerance) << context << ": " << what << " of " << t.name;
    }
  }
  ASSERT_EQ(got.metrics.size(), want.metrics.size());
  for (std::size_t s = 0; s < want.metrics.size(); ++s) {
    const StepMetrics &a = got.metrics[s], &b = want.metrics[s];
    const std::string at = context + " step " + std::to_string(s);
    EXPECT_EQ(a.step, b.step) << at;
    EXPECT_LE(scalar_relative_error(a.loss, b.loss), kReferenceTolerance) << at << " loss";
    EXPECT_LE(scalar_relative_error(a.ce, b.ce), kReferenceTolerance) << at << " ce";
    EXPECT_LE(scalar_relative_error(a.kl, b.kl), kReferenceTolerance) << at << " kl";
    EXPECT_LE(scalar_relative_error(a.weight_sum, b.weight_sum), kReferenceTolerance) << at << " W";
    EXPECT_LE(scalar_relative_error(a.grad_norm, b.grad_norm), kReferenceTolerance) << at << " grad norm";
    EXPECT_EQ(a.lr, b.lr) << at;
    EXPECT_EQ(a.accuracy, b.accuracy) << at;
    EXPECT_EQ(a.tokens, b.tokens) << at;
    EXPECT_EQ(a.clipped, b.clipped) << at;
  }
}

}  // namespace dflash::testing
