// One row of `dflash verify`: a check, its measured error, the tolerance it is held to, and
// the peak bytes the tracker saw while it ran.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace dflash {

struct VerifyRow {
  std::string group;        // "loss_head", "drafter", "golden", "cuda", ...
  std::string case_name;    // what data it ran on
  std::string variant;      // policy, chunk size, comparison
  double error = 0;         // max relative error (SPEC §10 measure)
  double tolerance = 0;     // the bound it is held to
  std::size_t peak_bytes = 0;
  bool skipped = false;     // not runnable here (no GPU): neither pass nor fail
  std::string note;         // why it was skipped, or what was compared

  bool passed() const { return !skipped && error <= tolerance; }
};

// Prints the table; returns the number of failed rows.
int print_verify_table(std::ostream& out, const std::vector<VerifyRow>& rows);

}  // namespace dflash
