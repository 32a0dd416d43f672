// One row of `dflash verify`: a check, its measured error, the tolerance it is held to, and
// the peak bytes the tracker saw while it ran.
//
// Rows are built by name, one function per kind of check (a tolerance, an exact equality, a
// check that cannot run here, a check that threw), never from a positional list of fields:
//
//   rows.push_back(tolerance_row({.group = "loss_head", .case_name = c.name, .variant = "materialize"},
//                                {.error = e, .tolerance = 1e-12, .peak_bytes = peak, .note = "vs oracle"}));
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace dflash {

// Which check a row is.
struct RowName {
  std::string group;      // "loss_head", "drafter", "golden", "cuda", ...
  std::string case_name;  // what data it ran on
  std::string variant;    // policy, chunk size, comparison
};

// What a check within a tolerance measured.
struct Measured {
  double error = 0;            // max relative error (SPEC §10 measure)
  double tolerance = 0;        // the bound it is held to
  std::size_t peak_bytes = 0;  // the tracker's peak while it ran (0: not tracked)
  std::string note{};          // what was compared
};

// What an exact check measured: how far apart the two sides are (a relative difference, a
// fraction of mismatched draws, 1 for "not bitwise equal"); it passes only at 0.
struct Mismatch {
  double mismatch = 0;
  std::size_t peak_bytes = 0;
  std::string note{};
};

class VerifyRow {
 public:
  std::string group, case_name, variant;
  double error = 0;
  double tolerance = 0;
  std::size_t peak_bytes = 0;
  bool skipped = false;  // not runnable here (no GPU): neither pass nor fail
  std::string note;      // why it was skipped, or what was compared

  bool passed() const { return !skipped && error <= tolerance; }

  friend VerifyRow tolerance_row(RowName name, Measured m);
  friend VerifyRow exact_row(RowName name, Mismatch m);
  friend VerifyRow skipped_row(RowName name, std::string reason);
  friend VerifyRow threw_row(RowName name, std::string what);

 private:
  explicit VerifyRow(RowName name);
};

// A measured error held to a tolerance: passes at error <= tolerance.
VerifyRow tolerance_row(RowName name, Measured m);

// An exact check (bitwise results, a peak equal to its plan, replayed masks): passes at 0.
VerifyRow exact_row(RowName name, Mismatch m);

// A check that cannot run on this machine (no GPU, no CUDA build): SKIPPED with the reason.
VerifyRow skipped_row(RowName name, std::string reason);

// A check that threw: FAIL (error = infinity), with what it threw.
VerifyRow threw_row(RowName name, std::string what);

// Prints the table; returns the number of failed rows.
int print_verify_table(std::ostream& out, const std::vector<VerifyRow>& rows);

}  // namespace dflash
