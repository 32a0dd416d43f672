#include "golden/check.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "common/tolerances.hpp"
#include "golden/loss_head.hpp"
#include "reference/compare.hpp"

namespace dflash {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_loss_like(std::string_view tensor) {
  return tensor == "output/loss" || tensor == "output/ce" || tensor == "output/kl" || tensor == "output/lse" ||
         tensor == "output/token_loss";
}

GoldenCheckRow failed_file_row(const std::string& file, const std::string& why) {
  return {file, "(file)", kInf, 0, why};
}

// One float tensor against its reference values.
GoldenCheckRow compare_tensor(const std::string& file, const std::string& name, const Shape& shape,
                              std::span<const double> values, const Shape& want_shape, std::span<const double> want,
                              double tolerance, double floor) {
  GoldenCheckRow row{file, name, 0, tolerance, floor > 0 ? str("floor ", floor) : std::string()};
  if (shape != want_shape || values.size() != want.size()) {
    row.error = kInf;
    row.note =
        str("shape ", shape_string(shape), " (", values.size(), " values), the golden has ", shape_string(want_shape));
    return row;
  }
  row.error = relative_error(values, want, floor);
  return row;
}

}  // namespace

GoldenOutputs with_tolerance(GoldenResults tensors, double tolerance) {
  GoldenOutputs out{std::move(tensors), {}};
  for (const auto& [name, t] : out.tensors) out.tolerance[name] = tolerance;
  return out;
}

GoldenImplementation reference_golden_implementation() {
  return {"reference", "the double-precision reference step, trunk and loss head, recomputed from the stored inputs",
          [](MemoryTracker& tracker, const Golden& g) {
            return with_tolerance(
                golden_results_of(drafter_step(tracker, g.config, g.params, g.frozen, g.batch, g.step_options())),
                kReferenceTolerance);
          }};
}

GoldenImplementation reference_loss_head_golden_implementation() {
  return {"reference-loss-head", "the double-precision reference loss head alone, from the stored Y (output/hidden)",
          [](MemoryTracker& tracker, const Golden& g) {
            return with_tolerance(reference_loss_head_results(tracker, g), kReferenceTolerance);
          }};
}

double golden_comparison_floor(std::string_view tensor, double magnitude) {
  return is_loss_like(tensor) ? magnitude : 0;
}

double golden_loss_magnitude(const Golden& golden) {
  MemoryTracker tracker;
  double magnitude = 0;
  reference_loss_head_results(tracker, golden, &magnitude);
  return magnitude;
}

std::vector<GoldenCheckRow> compare_golden_outputs(const Golden& golden, const GoldenOutputs& computed) {
  std::vector<GoldenCheckRow> rows;
  if (computed.tensors.empty()) {
    rows.push_back(failed_file_row(golden.source, "the implementation produced no tensors"));
    return rows;
  }
  const double magnitude = golden_loss_magnitude(golden);
  for (const auto& [name, t] : computed.tensors) {
    const auto tolerance = computed.tolerance.find(name);
    if (tolerance == computed.tolerance.end()) {
      rows.push_back({golden.source, name, kInf, 0, "the implementation gave no tolerance for it"});
      continue;
    }
    const auto want = golden.results.find(name);
    if (want == golden.results.end()) {
      rows.push_back({golden.source, name, kInf, tolerance->second, "not an output/ or grad/ tensor of the golden"});
      continue;
    }
    rows.push_back(compare_tensor(golden.source, name, t.shape, t.values, want->second.shape, want->second.values,
                                  tolerance->second, golden_comparison_floor(name, magnitude)));
  }
  return rows;
}

std::vector<GoldenCheckRow> check_golden(const Golden& golden, const GoldenImplementation& implementation) {
  try {
    MemoryTracker tracker;
    return compare_golden_outputs(golden, implementation.compute(tracker, golden));
  } catch (const std::exception& e) {
    return {failed_file_row(golden.source, str(implementation.name, " threw: ", e.what()))};
  }
}

std::vector<GoldenCheckRow> check_golden_file(const std::filesystem::path& path,
                                              const GoldenImplementation& implementation, std::string* case_name) {
  std::optional<Golden> golden;
  try {
    golden.emplace(read_golden(path));
  } catch (const InputError& e) {
    return {failed_file_row(path.string(), e.what())};
  }
  if (case_name != nullptr) *case_name = golden->case_name;
  return check_golden(*golden, implementation);
}

std::vector<std::filesystem::path> golden_files_in(const std::filesystem::path& directory) {
  std::error_code error;
  if (!std::filesystem::exists(directory, error)) {
    throw_input_error("golden directory", str("'", directory.string(), "' does not exist"));
  }
  if (!std::filesystem::is_directory(directory, error)) {
    throw_input_error("golden directory", str("'", directory.string(), "' is not a directory"));
  }
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  }
  if (error)
    throw_input_error("golden directory", str("'", directory.string(), "' cannot be listed: ", error.message()));
  if (files.empty())
    throw_input_error("golden directory", str("'", directory.string(), "' holds no *.safetensors file"));
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<GoldenCheckRow> compare_goldens(const Golden& expected, const Golden& actual, double tolerance) {
  const std::string& file = actual.source;
  std::vector<GoldenCheckRow> rows;
  const safetensors::Metadata want_meta = golden_metadata(expected), got_meta = golden_metadata(actual);
  GoldenCheckRow meta{file, "(metadata)", 0, 0, ""};
  for (const auto& [key, value] : want_meta) {
    if (got_meta.at(key) != value) {
      meta.error = kInf;
      meta.note += str("'", key, "' is ", got_meta.at(key), ", expected ", value, "; ");
    }
  }
  rows.push_back(meta);

  std::map<std::string, GoldenIntegerTensor> want_ints;
  for (GoldenIntegerTensor& t : golden_integer_tensors(expected)) want_ints.emplace(t.name, std::move(t));
  for (const GoldenIntegerTensor& t : golden_integer_tensors(actual)) {
    const GoldenIntegerTensor& w = want_ints.at(t.name);
    const bool same = t.shape == w.shape && t.values == w.values;
    rows.push_back({file, t.name, same ? 0 : kInf, 0, same ? "identical" : "integer values differ"});
  }

  const double magnitude = golden_loss_magnitude(expected);
  std::map<std::string, GoldenFloatView> want_floats;
  for (const GoldenFloatView& v : golden_float_tensors(expected)) want_floats.emplace(v.name, v);
  std::set<std::string> seen;
  for (const GoldenFloatView& v : golden_float_tensors(actual)) {
    seen.insert(v.name);
    const auto w = want_floats.find(v.name);
    if (w == want_floats.end()) {
      rows.push_back({file, v.name, kInf, tolerance, "not in the expected golden"});
      continue;
    }
    rows.push_back(compare_tensor(file, v.name, *v.shape, v.values, *w->second.shape, w->second.values, tolerance,
                                  golden_comparison_floor(v.name, magnitude)));
  }
  for (const auto& [name, v] : want_floats) {
    if (!seen.contains(name)) rows.push_back({file, name, kInf, tolerance, "missing"});
  }
  return rows;
}

int print_golden_check_table(std::ostream& out, const std::vector<GoldenCheckRow>& rows) {
  std::size_t w_file = 4, w_tensor = 6;
  auto file_name = [](const std::string& f) { return std::filesystem::path(f).filename().string(); };
  for (const GoldenCheckRow& r : rows) {
    w_file = std::max(w_file, file_name(r.file).size());
    w_tensor = std::max(w_tensor, r.tensor.size());
  }
  char line[1024];
  auto emit = [&](const std::string& f, const std::string& t, const std::string& err, const std::string& tol,
                  const std::string& status, const std::string& note) {
    std::snprintf(line, sizeof line, "%-*s  %-*s  %10s  %9s  %-6s", int(w_file), f.c_str(), int(w_tensor), t.c_str(),
                  err.c_str(), tol.c_str(), status.c_str());
    out << line << (note.empty() ? "" : "  " + note) << "\n";
  };
  emit("file", "tensor", "rel err", "tolerance", "result", "");
  int failed = 0;
  std::set<std::string> files;
  for (const GoldenCheckRow& r : rows) {
    char err[32], tol[32];
    std::snprintf(err, sizeof err, "%.3e", r.error);
    std::snprintf(tol, sizeof tol, "%.0e", r.tolerance);
    emit(file_name(r.file), r.tensor, err, tol, r.passed() ? "PASS" : "FAIL", r.note);
    failed += r.passed() ? 0 : 1;
    files.insert(r.file);
  }
  out << rows.size() << " tensors in " << files.size() << " files: " << rows.size() - failed << " PASS, " << failed
      << " FAIL\n";
  return failed;
}

}  // namespace dflash
