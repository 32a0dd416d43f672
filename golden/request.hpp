// A golden at the user's own config and shape (`dflash golden generate --config FILE ...`): the
// case a request describes, and what generating it will cost, estimated before it runs.
//
// The data come from seeds exactly as the built-in cases' do (golden/cases.hpp): inputs and
// parameters from the request's seed (the parameters from a drafter directory instead with
// `weights`), anchors sampled by SPEC §4 for (seed, step, sequence), one double-precision
// reference step. The same request (and the same weight files) always gives the same bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "golden/cases.hpp"

namespace dflash {

struct GoldenRequest {
  DrafterConfig config;
  std::string case_name;              // the metadata's `case`
  std::int64_t sequences = 2;         // nseq
  std::int64_t context = 0;           // S; 0: block_size x max_anchors (room for every slot's block)
  std::optional<std::uint64_t> seed;  // replaces the config's seed (RNG and data); none: the config's
  std::uint32_t step = 0;
  std::optional<double> attention_dropout, hidden_dropout;  // replace the config's
  std::optional<std::filesystem::path> weights;             // GoldenCase::weights (--weights DIR)
};

// Loss-mask holes in generated data: enough that some blocks hold holes (SPEC §4's w01 = 0 rows),
// few enough that nearly every slot finds an anchor.
inline constexpr double kRequestMaskHoleFraction = 0.1;

// The case the request describes (config with the overrides applied). InputError naming the flag
// (--sequences, --context, --attention-dropout, ...) or the config field for a bad request.
GoldenCase golden_request_case(const GoldenRequest& request);

// What generating a case costs on the CPU, before running it.
struct GoldenCostEstimate {
  double multiply_adds = 0;     // of the reference step (forward, backward, recomputation)
  double seconds = 0;           // multiply_adds x kReferenceSecondsPerMultiplyAdd
  std::int64_t step_bytes = 0;  // the memory plan's total at the reference's 8-byte elements
  std::int64_t file_bytes = 0;  // the golden file
  std::int64_t bytes = 0;       // peak: the step, plus the golden's copy of its results and the file's bytes
};

// Seconds per multiply-add of the double reference, measured: the mid config (configs/mid.json)
// with 2 sequences and S = 48, 3.0e10 multiply-adds by golden_step_multiply_adds, took 13 s of CPU
// on one core of the project's 2-core machines (4.3e-10 s: the reference's plain loops in double,
// -ffp-contract=off, ~2.3 G multiply-adds/s). Set at 1e-9, about twice that, because CI and
// workstations run it next to other jobs (the same run took 54 s of wall time next to four
// compilers); a faster or idle machine only makes the estimate pessimistic.
inline constexpr double kReferenceSecondsPerMultiplyAdd = 1e-9;

// The budget above which `generate` refuses without --force: ten minutes and 16 GiB, what a
// workstation or a CI job can spend on one golden without planning for it.
inline constexpr double kGenerateSecondsBudget = 600;
inline constexpr std::int64_t kGenerateBytesBudget = std::int64_t(16) << 30;

// Multiply-adds of one reference step on the case: per sequence the forward (fc over the context,
// per layer the projections of the block rows and of the context keys and values, attention over
// all S + T keys, the MLP; the student and teacher logits), counted three times (forward, and a
// backward of about twice its cost) plus once more for what the policies recompute.
double golden_step_multiply_adds(const GoldenCase& golden_case);

GoldenCostEstimate estimate_golden_cost(const GoldenCase& golden_case);

// "about 14 s and 0.35 GiB (file 0.09 GiB)"
std::string describe_estimate(const GoldenCostEstimate& estimate);

// Whether the estimate is within the budget; the message says which part is over, by how much.
std::optional<std::string> over_budget(const GoldenCostEstimate& estimate);

}  // namespace dflash
