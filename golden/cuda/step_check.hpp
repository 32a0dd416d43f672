// `dflash golden check --impl cuda`: the whole CUDA step (cuda_drafter_step: trunk, loss head,
// backward) recomputed from each golden's stored inputs, anchors and step; output/loss, ce, kl,
// accuracy, weight_sum and every grad/ tensor, each held to SPEC §10's bf16 rule as `dflash golden
// compare --rule bf16` states it for a whole step (golden/compare_rules.hpp), with one
// reading: the loss-head quantities' calibrated bound comes from a plain bf16 loss head on the
// golden's exact Y, but a whole bf16 step feeds the loss head its own, rounded Y, so these are
// held to the larger of that bound and the step's (step_result_bound, which counts the trunk's
// roundings on the way to the logits). Without a usable GPU it throws, with the reason; the CLI
// reports SKIPPED instead of running it (`needs_gpu`).
#pragma once

#include "golden/check.hpp"

namespace dflash {

GoldenImplementation cuda_drafter_step_golden_implementation();

}  // namespace dflash
