#include "golden/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "golden/check.hpp"
#include "io/safetensors_reader.hpp"

namespace dflash {

namespace {

using safetensors::Dtype;

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_result_name(std::string_view name) { return name.starts_with("output/") || name.starts_with("grad/"); }

// The first element that is not finite, if any.
std::optional<std::size_t> first_non_finite(const std::vector<double>& values) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) return i;
  }
  return std::nullopt;
}

// Why a tensor present in the golden cannot be compared numerically, if it cannot.
std::optional<std::string> unusable_reason(const ResultTensor& t, const GoldenTensor& want, CompareRule rule) {
  const std::string_view dtype = safetensors::dtype_name(t.dtype);
  if (t.shape != want.shape) {
    return str("shape ", shape_string(t.shape), ", the golden has ", shape_string(want.shape));
  }
  if (!is_result_dtype(t.dtype)) return str("dtype ", dtype, " is not a result dtype (F64, F32 or BF16)");
  if (!storage_is_fine_enough(t.dtype, rule)) {
    return str("stored as ", dtype, ", coarser than the ", compare_rule_name(rule), " rule's ",
               safetensors::dtype_name(finest_storage_needed(rule)), ": its own rounding is already the error");
  }
  if (const auto bad = first_non_finite(t.values)) return str("element ", *bad, " is ", t.values[*bad]);
  return std::nullopt;
}

std::string error_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3e", x);
  return text;
}

}  // namespace

ResultFile read_result_file(const std::filesystem::path& path) {
  const safetensors::Reader reader = safetensors::Reader::open_file(path);
  ResultFile file{path.string(), {}};
  for (const std::string& name : reader.names()) {
    const safetensors::TensorInfo& info = reader.info(name);
    ResultTensor t{name, info.dtype, info.shape, {}};
    if (safetensors::dtype_is_float(info.dtype)) t.values = reader.doubles(name);
    file.tensors.push_back(std::move(t));
  }
  if (file.tensors.empty()) throw_input_error("result file", str("'", file.source, "' holds no tensors"));
  return file;
}

int CompareReport::failures() const {
  return static_cast<int>(std::count_if(rows.begin(), rows.end(), [](const CompareRow& r) { return !r.passed(); }));
}

CompareReport compare_results(const Golden& golden, const ResultFile& result, CompareRule rule) {
  CompareReport report{golden.source, result.source, golden.case_name, rule, {}, {}, {}};
  std::set<std::string> other_golden_names;
  for (const GoldenFloatView& v : golden_float_tensors(golden)) {
    if (!is_result_name(v.name)) other_golden_names.insert(v.name);
  }
  for (const GoldenIntegerTensor& t : golden_integer_tensors(golden)) other_golden_names.insert(t.name);

  GoldenOutputs judged;
  std::set<std::string> held;
  for (const ResultTensor& t : result.tensors) {
    held.insert(t.name);
    const std::string dtype(safetensors::dtype_name(t.dtype));
    if (const auto want = golden.results.find(t.name); want != golden.results.end()) {
      if (const auto why = unusable_reason(t, want->second, rule)) {
        report.rows.push_back({t.name, dtype, kInf, 0, *why});
      } else {
        judged.tensors[t.name] = GoldenTensor{t.shape, t.values};
      }
    } else if (other_golden_names.contains(t.name)) {
      report.ignored.push_back(t.name);
    } else {
      report.rows.push_back({t.name, dtype, kInf, 0, "not an output/ or grad/ tensor of the golden"});
    }
  }
  if (judged.tensors.empty() && report.rows.empty()) {
    throw_input_error("result file", str("'", result.source, "' holds none of the output/ or grad/ tensors of '",
                                         golden.source, "' (only input/, frozen/ or param/ ones)"));
  }
  if (!judged.tensors.empty()) {
    const auto bounds = golden_result_bounds(golden, rule);
    std::map<std::string, Dtype, std::less<>> stored;
    for (const ResultTensor& t : result.tensors) stored[t.name] = t.dtype;
    for (const auto& [name, t] : judged.tensors) {
      judged.tolerance[name] = stored_result_bound(name, bounds.at(name), stored.at(name));
    }
    for (GoldenCheckRow& row : compare_golden_outputs(golden, judged)) {
      report.rows.push_back({row.tensor, std::string(safetensors::dtype_name(stored.at(row.tensor))), row.error,
                             row.tolerance, std::move(row.note)});
    }
  }
  std::sort(report.rows.begin(), report.rows.end(),
            [](const CompareRow& a, const CompareRow& b) { return a.tensor < b.tensor; });
  for (const auto& [name, t] : golden.results) {
    if (!held.contains(name)) report.missing.push_back(name);
  }
  return report;
}

int print_compare_report(std::ostream& out, const CompareReport& report) {
  std::size_t width = 6;
  for (const CompareRow& r : report.rows) width = std::max(width, r.tensor.size());
  char line[512];
  auto emit = [&](const std::string& tensor, const std::string& dtype, const std::string& error,
                  const std::string& bound, const std::string& status, const std::string& note) {
    std::snprintf(line, sizeof line, "%-*s  %-5s  %10s  %10s  %-6s", int(width), tensor.c_str(), dtype.c_str(),
                  error.c_str(), bound.c_str(), status.c_str());
    std::string text = line + (note.empty() ? "" : "  " + note);
    text.erase(text.find_last_not_of(' ') + 1);
    out << text << "\n";
  };
  emit("tensor", "dtype", "error", "bound", "result", "");
  for (const CompareRow& r : report.rows) {
    emit(r.tensor, r.dtype, error_text(r.error), error_text(r.bound), r.passed() ? "PASS" : "FAIL", r.note);
  }
  // The first few missing names (a loss-head result misses every gradient); --json lists all.
  constexpr std::size_t kNamesShown = 8;
  if (!report.missing.empty()) {
    out << "missing from the result, not judged: " << report.missing.size() << " (";
    for (std::size_t i = 0; i < std::min(kNamesShown, report.missing.size()); ++i) {
      out << (i > 0 ? ", " : "") << report.missing[i];
    }
    out << (report.missing.size() > kNamesShown ? ", ...)\n" : ")\n");
  }
  if (!report.ignored.empty()) {
    out << "ignored: " << report.ignored.size() << " input/, frozen/ and param/ tensors (not results)\n";
  }
  const int failed = report.failures();
  out << report.rows.size() << " tensors, rule " << compare_rule_name(report.rule) << ": "
      << report.rows.size() - std::size_t(failed) << " PASS, " << failed << " FAIL\n";
  return failed;
}

nlohmann::json compare_report_json(const CompareReport& report) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const CompareRow& r : report.rows) {
    tensors.push_back({{"name", r.tensor},
                       {"dtype", r.dtype},
                       {"error", std::isfinite(r.error) ? nlohmann::json(r.error) : nlohmann::json(nullptr)},
                       {"bound", r.bound},
                       {"passed", r.passed()},
                       {"note", r.note}});
  }
  return {{"golden", report.golden},   {"case", report.golden_case},
          {"result", report.result},   {"rule", compare_rule_name(report.rule)},
          {"passed", report.passed()}, {"failures", report.failures()},
          {"tensors", tensors},        {"missing", report.missing},
          {"ignored", report.ignored}};
}

}  // namespace dflash
