// A training golden: several optimizer steps of the reference training core (TRAINING §11–§13)
// frozen into a safetensors file, with SPEC §9's conventions (F64 floats, I64 integers, C order,
// string metadata) plus the optimizer state of §12. `dflash golden check-training` recomputes it
// with an implementation (the reference on one process today; a CUDA or multi-rank trainer is one
// more TrainingGoldenImplementation) and compares tensor by tensor.
//
// `__metadata__`: format = "dflash-training-golden", version = "1", case, config (the drafter
// config and the training fields in one JSON object), seed (the config's), steps.
// Tensors, for steps t = 0 .. steps-1 and a global batch of nseq sequences of equal S (global
// indices 0 .. nseq-1, anchors sampled in the step from (seed, t, g)):
//   input/step<t>/tokens [nseq,S]  input/step<t>/loss_mask [nseq,S]
//   input/step<t>/target_features [nseq,S,K H]  input/step<t>/teacher_hidden [nseq,S,H]
//   frozen/embed_tokens.weight [V,H]  frozen/lm_head.weight [V,H]
//   initial/param/<name>                          the parameters before step 0
//   final/param/<name>  final/exp_avg/<name>  final/exp_avg_sq/<name>   after the last step
//   metrics/loss ce kl accuracy weight_sum lr grad_norm [steps] (F64), metrics/clipped tokens [steps] (I64)
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "distributed/train_step.hpp"
#include "distributed/training_config.hpp"
#include "golden/check.hpp"
#include "golden/file.hpp"

namespace dflash {

inline constexpr std::string_view kTrainingGoldenFormat = "dflash-training-golden";
inline constexpr std::string_view kTrainingGoldenVersion = "1";

struct TrainingGoldenCase {
  std::string name;     // the file's stem
  std::string summary;  // one line
  DrafterConfig config;
  TrainingConfig training;  // global_batch_sequences sequences per step, all of context length S
  std::int64_t steps = 3;
  std::int64_t context_length = 12;  // S
  std::uint64_t data_seed = 1;       // inputs of step t from data_seed + t
  std::uint64_t parameter_seed = 1;  // parameters; frozen weights from parameter_seed + 1
};

// Every case (golden/README.md, "Training goldens"), and the one called `name`.
const std::vector<TrainingGoldenCase>& training_golden_cases();
const TrainingGoldenCase& training_golden_case(std::string_view name);

struct TrainingGolden {
  TrainingGolden() = default;
  TrainingGolden(TrainingGolden&&) = default;
  TrainingGolden& operator=(TrainingGolden&&) = delete;

  std::string source;
  std::string case_name;
  DrafterConfig config;
  TrainingConfig training;
  std::int64_t steps = 0;
  std::unique_ptr<MemoryTracker> tracker = std::make_unique<MemoryTracker>();  // outlives the tensors below
  std::vector<DrafterBatch<double>> batches;                                   // one per step, sampled anchors
  FrozenWeights<double> frozen;
  DrafterParameters<double> initial;
  GoldenResults results;  // final/..., metrics/...
};

// Runs the reference training core on one process over the case's steps.
TrainingGolden generate_training_golden(const TrainingGoldenCase& golden_case);

void write_training_golden(const TrainingGolden& golden, const std::filesystem::path& path);
// Validates format, version, metadata, config and every tensor's name, dtype and shape; InputError
// naming the file and the problem.
TrainingGolden read_training_golden(const std::filesystem::path& path);

// The final/ and metrics/ tensors of a run from the golden's initial parameters and inputs.
struct TrainingGoldenImplementation {
  std::string name;
  std::string description;
  std::function<GoldenOutputs(MemoryTracker&, const TrainingGolden&)> compute;
  // Runs only on a GPU: where none is usable `golden check-training` reports SKIPPED with the
  // reason (a failure under DFLASH_REQUIRE_GPU=1), as `golden check` does.
  bool needs_gpu = false;
};

// The final/ and metrics/ tensors of any backend's run: master weights and moments as full flat
// vectors (P values each, canonical order, FlatLayout's offsets) and the step metrics.
GoldenResults training_golden_results(const FlatLayout& layout, std::span<const double> master,
                                      std::span<const double> exp_avg, std::span<const double> exp_avg_sq,
                                      std::span<const StepMetrics> metrics);

// Whether a metrics/ tensor is a count or a flag (clipped, tokens): compared exactly.
bool is_integer_metric(std::string_view name);

// The reference training core on one process (SingleProcessCommunicator): every final/ and
// metrics/ tensor, floats held to 1e-12 (SPEC §10) and the integer metrics exactly.
TrainingGoldenImplementation reference_training_golden_implementation();

// One row per computed tensor; a file that cannot be read, or an implementation that throws, is
// one failed "(file)" row.
std::vector<GoldenCheckRow> check_training_golden_file(const std::filesystem::path& path,
                                                       const TrainingGoldenImplementation& implementation);

// Where the committed training goldens are: <default_golden_dir()>/training.
std::filesystem::path default_training_golden_dir();

}  // namespace dflash
