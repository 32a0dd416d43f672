// The "plain low-precision computation" of SPEC §10 for the CUDA loss head, on the CPU: the same
// problem with bf16 rounding exactly where the device rounds (the inputs Y, G, W_lm; every logit
// z and t; every dL/dz) and exact (double) arithmetic everywhere else. Its distance from the
// double reference is the error bf16 storage alone costs; the CUDA results may be at most twice
// as far, plus a floor (reference/bf16_tolerance.hpp).
#pragma once

#include <cstdint>

#include "reference/loss_head_problem.hpp"

namespace dflash {

// The problem in the device's formats, exactly: tensors rounded to bf16 (round to nearest even,
// through fp32 as the upload does), weights to fp32, W re-summed from the rounded weights. The
// reference run on this problem is what the CUDA path is compared with, so input rounding is no
// part of any measured error.
LossHeadProblem<double> round_to_device_formats(MemoryTracker& tracker, const LossHeadProblem<double>& problem);

struct Bf16Emulation {
  LossHeadResult<double> result;
  // Valid rows whose argmax may legitimately differ between exact and device logits: some
  // column's exact logit lies within the two columns' device error bounds of the exact maximum
  // (|z_device - z| <= 2^-8 |z| + H 2^-23 sum_h |y_h w_h|: twice the bf16 half-ulp plus twice
  // the worst fp32 accumulation error).
  std::int64_t ambiguous_argmax_rows = 0;
};

// `problem` must be in the device formats (round_to_device_formats). No dL/dW_lm. When the
// reference it is compared with ran on other inputs (`exact`, which `problem` rounds: a golden
// file's), the argmax ambiguity is judged on those inputs' logits, with the inputs' own bf16
// rounding (2 x 2^-8 sum_h |y_h w_h|) added to the device error bound.
Bf16Emulation hybrid_loss_bf16_emulation(MemoryTracker& tracker, const LossHeadOptions& options,
                                         const LossHeadProblem<double>& problem,
                                         const LossHeadProblem<double>* exact = nullptr);

}  // namespace dflash
