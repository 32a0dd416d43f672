// `dflash golden check --impl cuda-loss-head`: the CUDA loss head on every golden file, from the
// stored Y (output/hidden) and the teacher rows, as `reference-loss-head` does in double, each
// tensor held to SPEC §10's bf16 rule on that golden (golden/bf16_rule.hpp). Without a usable
// GPU it throws, with the reason; the CLI reports SKIPPED instead of running it (`needs_gpu`).
#pragma once

#include "golden/check.hpp"

namespace dflash {

GoldenImplementation cuda_loss_head_golden_implementation();

}  // namespace dflash
