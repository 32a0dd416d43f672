// Golden files (SPEC §9) as the CUDA loss head sees them, and the tolerance SPEC §10 gives it
// there. A golden holds the double reference on unrounded inputs, so the plain bf16 computation
// it is measured against rounds the inputs too (Y, G, W_lm to bf16; weights to fp32), exactly as
// the upload to the device does: tolerance = 2 x (plain computation vs golden, by the golden
// check's own measure) + kFp32Floor per tensor; for accuracy, the allowed count of changed rows
// (2 x the plain computation's + the rows whose argmax bf16 may flip) as a relative error.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "golden/check.hpp"
#include "reference/loss_head_problem.hpp"

namespace dflash {

// Per sequence, the loss head's problem as the golden defines it and in the device formats.
// W is the whole batch's: the golden's in `exact`, re-summed from the fp32 weights in `device`.
struct GoldenLossHeadProblems {
  LossHeadOptions options;  // the golden's h, s, tau, chunk rows; chunk_retain runs as chunk_recompute
  std::vector<LossHeadProblem<double>> exact;
  std::vector<LossHeadProblem<double>> device;
};

GoldenLossHeadProblems golden_loss_head_problems(MemoryTracker& tracker, const Golden& golden);

// output/loss, ce, kl, accuracy, weight_sum, lse, token_loss of a batch from its per-sequence
// results (losses already divided by the global W), summed in sequence order.
GoldenResults loss_head_golden_results(const std::vector<LossHeadResult<double>>& per_sequence, double weight_sum);

// The SPEC §10 tolerance of each of those tensors for a bf16 implementation, on this golden.
std::map<std::string, double, std::less<>> bf16_rule_golden_tolerances(MemoryTracker& tracker, const Golden& golden,
                                                                       const GoldenLossHeadProblems& problems);

}  // namespace dflash
