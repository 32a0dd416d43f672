// SPEC §10 for low-precision results: each quantity the CUDA loss head reports may be at most
// twice as far from the double reference as the plain bf16 computation of the same quantity
// (cuda/bf16_emulation.hpp), plus a floor stated here:
//   loss, ce, kl   |a - ref| / max(|ref|, magnitude) (the reference's scalar measure), floor 1e-5
//   lse, token loss, dL/dY   norm-wise relative error (reference/compare.hpp), floor 1e-5
//   correct        |count - ref count|, floor: the rows whose argmax bf16 logits may flip
//                  (Bf16Emulation::ambiguous_argmax_rows)
//   valid rows     exact (a count of flags)
// The 1e-5 floor is what fp32 arithmetic may add where bf16 storage happens to cost (almost)
// nothing, e.g. logits that bf16 holds exactly: fp32 row statistics (each thread sums at most
// V/256 terms, then an 8-level tree: for V <= 2^14, (64 + 8) u = 4.3e-6 with u = 2^-24, and
// 2-ulp exp on the device) and fp32 products over V (sqrt(V) u ~ 1e-5 at V = 2^14 even without
// cancellation). It is not a fitted number: the test sizes stay at V <= 2^14.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/bf16_emulation.hpp"

namespace dflash {

inline constexpr double kFp32Floor = 1e-5;

struct ToleranceEntry {
  std::string quantity;
  double error = 0;        // production vs reference
  double plain_error = 0;  // plain bf16 computation vs reference
  double floor = 0;
  double bound() const { return 2 * plain_error + floor; }
  bool ok() const { return error <= bound(); }
};

struct Bf16RuleReport {
  std::vector<ToleranceEntry> entries;
  bool ok() const;
  // max over quantities of error / bound (<= 1 passes; 0 when every error is 0)
  double worst_ratio() const;
  // One line per quantity: "lse: error 1.2e-04 <= 2 x 9.1e-05 + 1e-05 ok"
  std::string describe() const;
};

Bf16RuleReport check_bf16_rule(const LossHeadResult<double>& production, const Bf16Emulation& plain,
                               const LossHeadResult<double>& reference);

// One problem's double reference and plain bf16 computation, computed once, against which any
// number of production runs (policies, chunk sizes) are checked. Both run on the problem in the
// device formats, so the reference is exact maths on exactly the device's inputs.
class Bf16RuleOracle {
 public:
  Bf16RuleOracle(const LossHeadProblem<double>& problem, const LossHeadOptions& options);
  Bf16RuleOracle(const Bf16RuleOracle&) = delete;
  Bf16RuleOracle& operator=(const Bf16RuleOracle&) = delete;

  const LossHeadProblem<double>& device_problem() const { return problem_; }
  const LossHeadResult<double>& reference() const { return reference_; }
  const Bf16Emulation& plain() const { return plain_; }
  Bf16RuleReport check(const LossHeadResult<double>& production) const {
    return check_bf16_rule(production, plain_, reference_);
  }

 private:
  MemoryTracker tracker_;  // first: the tensors below are counted by it
  LossHeadProblem<double> problem_;
  LossHeadResult<double> reference_;
  Bf16Emulation plain_;
};

}  // namespace dflash
