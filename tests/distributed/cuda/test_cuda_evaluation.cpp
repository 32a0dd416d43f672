// Held-out evaluation (`--eval-data`) on the CUDA backend: StepBackend::forward_statistics runs
// cuda_drafter_forward_sequences on the resident bf16 working copy. Held against the reference
// backend's evaluation on exactly the device's inputs (parameters as the working copy holds them,
// E and W_lm rounded to bf16, a BF16 feature set, so the double reference computes on the same
// values), on the tiny and mid configs, with dropout in the config (evaluation turns it off):
//   - loss, ce, kl within SPEC §10's bf16 rule: 2 x the plain bf16 computation's error + kFp32Floor
//     (harness/cuda/drafter_step_twin.hpp: the step's own trunk code on the CPU in bf16 and the loss
//     head's plain bf16 computation, sequence by sequence);
//   - W, labelled rows, sequences and truncated sequences exactly (host arithmetic on both);
//   - no gradient made: the device's gradient peak is the state's flat vector; and the device
//     memory within the training step's plan (`dflash train --backend cuda`), up to the cuBLAS
//     workspaces only the device allocates.
// Skipped with the reason without a GPU (failed under DFLASH_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <string>

#include "cuda/gemm/cublas.hpp"
#include "cuda/gemm/linear.hpp"
#include "distributed/data/synthetic_set.hpp"
#include "distributed/run/cuda_step_backend.hpp"
#include "distributed/run/evaluation.hpp"
#include "distributed/run/plan_gate.hpp"
#include "distributed/single_process_communicator.hpp"
#include "harness/cuda/config_path.hpp"
#include "harness/cuda/drafter_step_twin.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "planner/parameter_memory.hpp"
#include "tests/distributed/training_problem.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash::testing {
namespace {

struct EvalCase {
  const char* config;
  std::int64_t sequences, min_length, max_length, max_context;
};

void PrintTo(const EvalCase& c, std::ostream* os) { *os << c.config << ", " << c.sequences << " sequences"; }

class CudaEvaluation : public GpuTest, public ::testing::WithParamInterface<EvalCase> {};

TEST_P(CudaEvaluation, MatchesTheReferenceWithinTheBf16Rule) {
  const EvalCase& e = GetParam();
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
  const auto cuda = make_cuda_step_backend(comm, config, training, frozen,
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
    const DrafterBatch<double> batch =
        drafter_batch_of(tracker, eval.sequence(i, training.max_context), config.feature_width(), config.hidden_size);
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

  const PlanRequest request = training_plan_request(config, training, 1, TrainingBackend::cuda);
  const std::int64_t flat_gradient =
      parameter_memory(drafter_parameter_counts(config), request.precision, request.layout)[PlanCategory::gradients];
  EXPECT_EQ(peaks.at(std::string(category_name(MemoryCategory::gradients))), flat_gradient)
      << "evaluation made a gradient";
  std::int64_t total = 0;
  for (const auto& [name, bytes] : peaks) total += bytes;
  const std::int64_t device_only =
      std::int64_t(LinearGemm::kWorkspaceBytes + CublasGemm::kDefaultWorkspaceBytes) + 3 * 64;
  EXPECT_LE(total, plan_training_memory(request).categories.total() + device_only);
}

// tiny: sequences of 16..32 rows cut at 24 (some truncated); mid: 100..300 rows (its sliding
// window, 256, binds), T = 512 block rows.
INSTANTIATE_TEST_SUITE_P(Configs, CudaEvaluation,
                         ::testing::Values(EvalCase{"tiny.json", 6, 16, 32, 24},
                                           EvalCase{"mid.json", 3, 100, 300, 300}),
                         [](const auto& info) {
                           const std::string file = info.param.config;
                           return file.substr(0, file.find('.'));
                         });

}  // namespace
}  // namespace dflash::testing
