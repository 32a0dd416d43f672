// The groups of rows `dflash verify` runs. Each part of the project contributes one function.
#pragma once

#include <vector>

#include "verify/row.hpp"

namespace dflash {

std::vector<VerifyRow> verify_loss_head_rows();

// The reference drafter on configs/tiny.json, dropout off and on: every trunk x loss policy
// (bitwise), saved peaks vs the plan, dropout replay, 50-digit forward and finite differences.
std::vector<VerifyRow> verify_drafter_rows();

// One row per golden case: the committed golden recomputed by the reference (1e-12).
std::vector<VerifyRow> verify_golden_rows();

// Only in builds with CUDA (DFLASH_WITH_CUDA): the CUDA loss head against the reference; every
// row SKIPPED, with the reason, where no GPU is usable.
std::vector<VerifyRow> verify_cuda_rows();

// Only in builds with CUDA: the whole CUDA step (trunk, loss head, backward) against the reference
// under the bf16 rule, its policies bitwise, hidden-dropout masks vs the CPU; SKIPPED without a GPU.
std::vector<VerifyRow> verify_cuda_step_rows();

}  // namespace dflash
