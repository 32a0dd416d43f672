// The golden part of the verification matrix: one row per golden case, the committed golden
// (golden/data, or $DFLASH_GOLDEN_DIR) recomputed by the reference from its stored inputs. The
// row's error is the worst relative error over every output and gradient (golden/check.hpp
// compares them), its tolerance the smallest the reference gives (it gives all of them 1e-12).
#include <algorithm>
#include <exception>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "golden/cases.hpp"
#include "golden/check.hpp"
#include "verify/rows.hpp"

namespace dflash {

std::vector<VerifyRow> verify_golden_rows() {
  std::vector<VerifyRow> rows;
  const GoldenImplementation reference = reference_golden_implementation();
  const std::filesystem::path dir = default_golden_dir();
  for (const GoldenCase& c : golden_cases()) {
    const std::filesystem::path path = dir / golden_file_name(c.name);
    const RowName name{.group = "golden", .case_name = c.name, .variant = "reference vs committed"};
    try {
      const Golden golden = read_golden(path);
      MemoryTracker tracker;
      const GoldenOutputs computed = reference.compute(tracker, golden);
      double error = 0;
      double tolerance = std::numeric_limits<double>::infinity();
      std::string worst;
      for (const GoldenCheckRow& r : compare_golden_outputs(golden, computed)) {
        if (r.error > error) worst = r.tensor;
        error = std::max(error, r.error);
        tolerance = std::min(tolerance, r.tolerance);
      }
      rows.push_back(tolerance_row(name, {.error = error,
                                          .tolerance = tolerance,
                                          .peak_bytes = tracker.peak_total(),
                                          .note = str(computed.tensors.size(), " tensors of ", path.filename().string(),
                                                      worst.empty() ? ", all bitwise equal" : ", worst " + worst)}));
    } catch (const std::exception& e) {
      rows.push_back(threw_row(name, e.what()));
    }
  }
  return rows;
}

}  // namespace dflash
