// Held-out evaluation (`--eval-data`) on the CUDA step's backend, written once over how the backend
// is made and run twice: on the GPU (test_cuda_evaluation.cpp: make_cuda_step_backend) and on the
// CPU (test_cuda_evaluation_cpu.cpp: DeviceStepBackend over the CPU's training backend).
// StepBackend::forward_statistics runs the forward alone on the resident bf16 working copy. Held
// against the reference backend's evaluation on exactly the device's inputs (parameters as the
// working copy holds them, E and W_lm rounded to bf16, a BF16 feature set, so the double reference
// computes on the same values), with dropout in the config (evaluation turns it off):
//   - loss, ce, kl within SPEC §10's bf16 rule: 2 x the plain bf16 computation's error + kFp32Floor
//     (harness/cuda/drafter_step_twin.hpp: the step's own trunk code on the CPU in bf16 and the loss
//     head's plain bf16 computation, sequence by sequence);
//   - W, labelled rows, sequences and truncated sequences exactly (host arithmetic on both);
//   - no gradient made: the backend's gradient peak is the state's flat vector; and its memory
//     within the training step's plan (`dflash train --backend cuda`), up to the loss head's small
//     records (at most 3 x 64 B) and `workspace_bytes` that only the device allocates (cuBLAS).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "distributed/data/synthetic_set.hpp"
#include "distributed/run/evaluation.hpp"
#include "distributed/run/plan_gate.hpp"
#include "distributed/run/step_backend.hpp"
#include "distributed/single_process_communicator.hpp"
#include "harness/cuda/config_path.hpp"
#include "harness/cuda/drafter_step_twin.hpp"
#include "planner/parameter_memory.hpp"
#include "tests/distributed/cuda/train_test_support.hpp"
#include "tests/distributed/training_problem.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash::testing {

struct EvalCase {
  const char* config;
  std::int64_t sequences, min_length, max_length, max_context;
};

void PrintTo(const EvalCase& c, std::ostream* os) { *os << c.config << ", " << c.sequences << " sequences"; }

// tiny: sequences of 16..32 rows cut at 24 (some truncated); mid: 100..300 rows (its sliding
// window, 256, binds), T = 512 block rows.
inline const EvalCase kEvalCases[] = {{"tiny.json", 6, 16, 32, 24}, {"mid.json", 3, 100, 300, 300}};
inline std::string eval_case_name(const EvalCase& c) {
  const std::string file = c.config;
  return file.substr(0, file.find('.'));
}

// The evaluated backend from the run's inputs, as the run makes it.
using MakeStepBackend = std::function<std::unique_ptr<StepBackend>(
    Communicator&, const DrafterConfig&, const TrainingConfig&, const FrozenWeightSource&, TrainingState)>;

inline void expect_evaluation_within_the_bf16_rule(const EvalCase& e, const MakeStepBackend& make_backend,
                                                   std::int64_t workspace_bytes) {
  MemoryTracker tracker;
  DrafterConfig config = load_drafter_config(test_config_file(e.config));
  config.attention_dropout = 0.1;  // evaluation must turn these off on both backends
  config.hidden_dropout = 0.1;
  TrainingConfig training = tiny_training_config(1, 1, 0);
  training.max_context = e.max_context;
  validate_training_config(training);

  safetensors::testing::ScratchDirectory dir;
  SyntheticDataSpec spec;
  spec.sequences = e.sequences;
  spec.shards = 1;
  spec.min_length = e.min_length;
  spec.max_length = e.max_length;
  write_synthetic_data(config, spec, dir / "syn");  // BF16 features and teacher rows
  const FeatureDataset eval = FeatureDataset::open(dir / "syn" / "features", FeatureSetShape::of(config));

  // The device's values: bf16 matrices and fp32 norms (the working copy of an fp32 master holding
  // them is the same), E and W_lm in bf16.
  auto device_parameters = [&] {
    DrafterParameters<double> p = init_drafter_parameters<double>(tracker, config, 3, 0.2);
    round_parameters_to_device_formats(p);
    return p;
  };
  const DrafterParameters<double> params = device_parameters();
  FrozenWeights<double> frozen = init_frozen_weights<double>(tracker, config, 5);
  round_to_bf16_in_place(frozen.embed_tokens);
  round_to_bf16_in_place(frozen.lm_head);

  SingleProcessCommunicator comm;
  MemoryTracker reference_tracker;
  const auto reference =
      make_reference_step_backend(reference_tracker, comm, config, training, frozen,
                                  make_training_state(reference_tracker, config, training, comm, device_parameters()));
  const std::unique_ptr<StepBackend> cuda =
      make_backend(comm, config, training, FrozenWeightsInMemory(frozen),
                   make_training_state(tracker, config, training, comm, device_parameters()));
  constexpr std::int64_t step = 2;
  const EvalRecord exact = evaluate(comm, *reference, config, training, eval, step);
  cuda->reset_peaks();
  const EvalRecord got = evaluate(comm, *cuda, config, training, eval, step);
  const std::map<std::string, std::int64_t> peaks = cuda->peak_bytes();

  // The plain bf16 computation, sequence by sequence with its own W, summed over the set's W.
  DrafterConfig no_dropout = config;
  no_dropout.attention_dropout = 0;
  no_dropout.hidden_dropout = 0;
  std::vector<double> plain(3, 0.0);
  for (std::int64_t i = 0; i < eval.num_sequences(); ++i) {
    const DrafterBatch<double> batch = eval.sequence_batch(tracker, i, training.max_context).batch;
    const DrafterStepOptions o = drafter_step_options(no_dropout, std::uint32_t(step), std::uint32_t(i));
    const double w = drafter_weight_sum(no_dropout, batch, o);
    if (w == 0) continue;
    const StepValues v = plain_bf16_drafter_step(no_dropout, params, frozen, batch, o);
    for (std::size_t k = 0; k < 3; ++k) plain[k] += v.losses[k] * w / exact.weight_sum;
  }

  ASSERT_GT(exact.tokens, 0) << "no labelled row: the set tests nothing";
  EXPECT_EQ(got.weight_sum, exact.weight_sum);
  EXPECT_EQ(got.tokens, exact.tokens);
  EXPECT_EQ(got.sequences, eval.num_sequences());
  EXPECT_EQ(got.truncated_sequences, exact.truncated_sequences);
  const RuleLine losses =
      rule_line("loss, ce, kl", {got.loss, got.ce, got.kl}, plain, {exact.loss, exact.ce, exact.kl}, kFp32Floor);
  EXPECT_TRUE(losses.ok()) << losses.name << ": error " << losses.error << " > bound " << losses.bound;
  std::printf("  %s: losses error %.2e plain %.2e bound %.2e; accuracy %.4f (reference %.4f)\n", e.config, losses.error,
              losses.plain_error, losses.bound, got.accuracy, exact.accuracy);
  // The hits, on kHitAgreement's premise that bf16 logits flip an argmax on at most 1 -
  // kHitAgreement of the labelled rows (near-ties; the rows labelled are the same): the accuracies
  // then differ by at most that share,
  EXPECT_LE(std::abs(got.accuracy - exact.accuracy), 1.0 - kHitAgreement)
      << "accuracy " << got.accuracy << " against the reference's " << exact.accuracy;
  // and the block statistics, from the loss head's hits: a flipped row moves one kept block's
  // acceptance length by at most B - 1, and a kept block holds at most B - 1 labelled rows (so
  // kept blocks >= tokens / (B - 1)): the mean moves by at most (1 - kHitAgreement)(B - 1)^2.
  // That bites on tiny (B 4: 0.45 on a range of 1 to 4; hits counted on every labelled row move
  // it by about 2) and is loose on mid (B 16: 11.25).
  const double b1 = double(config.block_size - 1);
  EXPECT_LE(std::abs(got.acceptance_length - exact.acceptance_length), (1.0 - kHitAgreement) * b1 * b1)
      << "acceptance length " << got.acceptance_length << " against the reference's " << exact.acceptance_length;

  // evaluate reads F and G in bf16 for this backend (reads_features_as_bf16): the forward on them
  // is bitwise the forward on the set's doubles, which it rounds to the same bits.
  ASSERT_TRUE(cuda->reads_features_as_bf16());
  {
    const std::int64_t i = eval.num_sequences() - 1;
    const DrafterStepOptions o = drafter_step_options(no_dropout, std::uint32_t(step), std::uint32_t(i));
    const FeatureDataset::Bf16Batch r = eval.sequence_bf16_batch(tracker, i, training.max_context);
    const SequenceEvaluation a =
        cuda->forward_statistics(no_dropout, eval.sequence_batch(tracker, i, training.max_context).batch, o);
    const SequenceEvaluation b = cuda->forward_statistics(no_dropout, r.batch, o, &r.features);
    EXPECT_EQ(a.stats.loss, b.stats.loss);
    EXPECT_EQ(a.stats.kl, b.stats.kl);
    EXPECT_EQ(a.stats.correct, b.stats.correct);
    EXPECT_EQ(a.weight_sum, b.weight_sum);
    EXPECT_GT(a.weight_sum, 0.0);
  }

  const PlanRequest request = training_plan_request(config, training, 1, TrainingBackend::cuda, single_rank_hosts());
  const std::int64_t flat_gradient =
      parameter_memory(drafter_parameter_counts(config), request.precision, request.layout)[PlanCategory::gradients];
  EXPECT_EQ(peaks.at(std::string(category_name(MemoryCategory::gradients))), flat_gradient)
      << "evaluation made a gradient";
  std::int64_t total = 0;
  for (const auto& [name, bytes] : peaks) total += bytes;
  EXPECT_LE(total, plan_training_memory(request).categories.total() + workspace_bytes + 3 * 64);
}

}  // namespace dflash::testing
