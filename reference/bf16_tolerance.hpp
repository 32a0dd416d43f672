// SPEC §10 for low-precision results: each quantity the CUDA loss head reports may be at most
// kPlainErrorFactor (2) times as far from the double reference as the plain bf16 computation of
// the same quantity (reference/bf16_emulation.hpp), plus a floor (common/tolerances.hpp):
//   loss, ce, kl   |a - ref| / max(|ref|, magnitude) (the reference's scalar measure), kFp32Floor
//   lse, token loss, dL/dY   norm-wise relative error (reference/compare.hpp), kFp32Floor
//   correct        |count - ref count|, floor: the rows whose argmax bf16 logits may flip
//                  (Bf16Emulation::ambiguous_argmax_rows)
//   valid rows     exact (a count of flags)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tolerances.hpp"
#include "reference/bf16_emulation.hpp"

namespace dflash {

struct ToleranceEntry {
  std::string quantity;
  double error = 0;        // production vs reference
  double plain_error = 0;  // plain bf16 computation vs reference
  double floor = 0;
  double bound() const { return kPlainErrorFactor * plain_error + floor; }
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
