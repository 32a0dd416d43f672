// Judging anyone's results against a golden (`dflash golden compare --golden FILE --result FILE`):
// the result file is any safetensors file holding some of the golden's output/ and grad/ tensors
// under the same names, in F64, F32 or BF16, written by an implementation in any framework.
//
// Each result tensor gets one row: the golden check's error (golden/check.hpp), the bound
// of the chosen rule (golden/compare_rules.hpp), PASS or FAIL, and a note. A row fails, with
// the reason in its note, for an error over the bound, a shape that differs from the golden's, a
// dtype the comparison does not read or one coarser than the rule needs, a non-finite value, or a
// name that is not an output/ or grad/ tensor of the golden. The golden's output/ and grad/ tensors
// the file does not hold are listed as missing (a result may hold only what an implementation
// computes); its input/, frozen/ and param/ tensors, if the file holds them, are ignored (so the
// golden itself is a valid result file).
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "golden/compare_rules.hpp"

namespace dflash {

struct ResultTensor {
  std::string name;
  safetensors::Dtype dtype = safetensors::Dtype::F64;
  Shape shape;
  std::vector<double> values;  // exact widening of the stored elements (float dtypes only)
};

// Every tensor of a result file. InputError naming the file if it is empty, truncated or not
// safetensors (the reader's validation) or holds no tensor at all.
struct ResultFile {
  std::string source;
  std::vector<ResultTensor> tensors;  // sorted by name
};
ResultFile read_result_file(const std::filesystem::path& path);

struct CompareRow {
  std::string tensor;
  std::string dtype;  // as stored in the result file
  double error = 0;   // infinity when the tensor could not be compared at all
  double bound = 0;
  std::string note;  // why a row failed, or the floor of a loss-like tensor

  // A tensor that could not be compared has error infinity and bound 0. A compared one may pass
  // with an infinite error only under an infinite bound: the bf16 rule allows any accuracy when
  // the golden's is 0 and some row's argmax is ambiguous (golden/bf16_rule.hpp).
  bool passed() const { return error <= bound; }
};

struct CompareReport {
  std::string golden, result;  // the files
  std::string golden_case;     // the golden's `case`: a golden at real weights names them there
  CompareRule rule = CompareRule::exact;
  std::vector<CompareRow> rows;      // one per result tensor judged, sorted by name
  std::vector<std::string> missing;  // the golden's output/ and grad/ names the result lacks
  std::vector<std::string> ignored;  // the golden's input/, frozen/ and param/ names the result holds
  int failures() const;
  bool passed() const { return failures() == 0; }
};

// InputError naming the result file when it holds none of the golden's tensors (nothing to judge).
CompareReport compare_results(const Golden& golden, const ResultFile& result, CompareRule rule);

// The table (tensor, dtype, error, bound, PASS/FAIL, note), missing and ignored names, a summary
// line; returns the failures.
int print_compare_report(std::ostream& out, const CompareReport& report);

// The same for machines: {"golden", "case", "result", "rule", "passed", "failures", "tensors": [{"name",
// "dtype", "error", "bound", "passed", "note"}], "missing": [...], "ignored": [...]}; an error that
// is infinite is written as null.
nlohmann::json compare_report_json(const CompareReport& report);

}  // namespace dflash
