#include <algorithm>
#include <cstdio>

#include "verify/row.hpp"

namespace dflash {

int print_verify_table(std::ostream& out, const std::vector<VerifyRow>& rows) {
  std::size_t w_group = 5, w_case = 4, w_variant = 6;
  for (const VerifyRow& r : rows) {
    w_group = std::max(w_group, r.group.size());
    w_case = std::max(w_case, r.case_name.size());
    w_variant = std::max(w_variant, r.variant.size());
  }
  char line[512];
  auto emit = [&](const std::string& g, const std::string& c, const std::string& v, const std::string& err,
                  const std::string& tol, const std::string& peak, const std::string& status, const std::string& note) {
    std::snprintf(line, sizeof line, "%-*s  %-*s  %-*s  %12s  %9s  %14s  %-7s", int(w_group), g.c_str(), int(w_case),
                  c.c_str(), int(w_variant), v.c_str(), err.c_str(), tol.c_str(), peak.c_str(), status.c_str());
    out << line << (note.empty() ? "" : "  " + note) << "\n";
  };
  emit("group", "case", "policy", "max rel err", "tolerance", "peak bytes", "result", "");
  int failed = 0, passed = 0, skipped = 0;
  for (const VerifyRow& r : rows) {
    char err[32], tol[32];
    std::snprintf(err, sizeof err, "%.3e", r.error);
    std::snprintf(tol, sizeof tol, "%.0e", r.tolerance);
    const std::string status = r.skipped ? "SKIPPED" : (r.passed() ? "PASS" : "FAIL");
    emit(r.group, r.case_name, r.variant, r.skipped ? "-" : err, r.skipped ? "-" : tol,
         r.skipped ? "-" : std::to_string(r.peak_bytes), status, r.note);
    failed += !r.skipped && !r.passed();
    passed += r.passed();
    skipped += r.skipped;
  }
  out << rows.size() << " rows: " << passed << " PASS, " << failed << " FAIL, " << skipped << " SKIPPED\n";
  return failed;
}

}  // namespace dflash
