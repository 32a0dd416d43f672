// `dflash golden check-training --impl cuda`: the CUDA training step (cuda_train_step.hpp) on one
// GPU with the single-process communicator, from a training golden's initial parameters and
// inputs over its steps: final master weights and Adam moments (fp32, gathered whole) and the
// per-step metrics, each held to golden/training_rule.hpp's bound (SPEC §10: the bf16
// rule for what the step computes, the fp32 rule for the optimizer). Built with CUDA only
// (library dflash_golden_cuda_training); without a usable GPU the check says SKIPPED.
#pragma once

#include "golden/training.hpp"

namespace dflash {

TrainingGoldenImplementation cuda_training_golden_implementation();

}  // namespace dflash
