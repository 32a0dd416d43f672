// libFuzzer target for golden compare's result files (golden/compare.hpp): the first byte picks the
// rule (exact, fp32, bf16), the other bytes are written as the result file and judged against the
// committed golden golden/data/tiny-full.safetensors (found through DFLASH_SOURCE_DIR, which
// ci/fuzz sets) as `dflash golden compare` judges them: read_result_file, compare_results, the
// table and the JSON report. A report has one row per result tensor that is not an ignored golden
// input, sorted by name, and the table counts its failures. The only acceptable failure
// is dflash::InputError; a crash, a sanitizer report or any other exception is a finding. Built
// and run by `ci/fuzz golden_result`.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "fuzz/scratch_dir.hpp"
#include "golden/compare.hpp"
#include "golden/file.hpp"
#include "io/errors.hpp"

namespace {

const dflash::Golden& golden() {
  static const dflash::Golden g = [] {
    const char* source = std::getenv("DFLASH_SOURCE_DIR");
    if (source == nullptr) {
      std::fprintf(stderr, "fuzz_golden_result: DFLASH_SOURCE_DIR (the repository) is not set\n");
      std::abort();
    }
    return dflash::read_golden(std::filesystem::path(source) / "golden/data/tiny-full.safetensors");
  }();
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const dflash::Golden& g = golden();
  constexpr dflash::CompareRule kRules[] = {dflash::CompareRule::exact, dflash::CompareRule::fp32,
                                            dflash::CompareRule::bf16};
  const dflash::CompareRule rule = kRules[data[0] % 3];
  const std::filesystem::path path = dflash::fuzz::scratch_dir() / "result.safetensors";
  dflash::fuzz::write_bytes(path, data + 1, size - 1);
  try {
    const dflash::ResultFile result = dflash::read_result_file(path);
    const dflash::CompareReport report = dflash::compare_results(g, result, rule);
    if (report.rows.size() + report.ignored.size() != result.tensors.size()) std::abort();
    for (std::size_t i = 1; i < report.rows.size(); ++i) {
      if (!(report.rows[i - 1].tensor < report.rows[i].tensor)) std::abort();  // not sorted by name, or twice
    }
    std::ostringstream table;
    const int failures = dflash::print_compare_report(table, report);
    if (failures != report.failures()) std::abort();
    const std::string json = dflash::compare_report_json(report).dump();
    if (json.empty()) std::abort();
  } catch (const dflash::InputError&) {
    // Refused, naming the file: the expected outcome for most bytes.
  }
  return 0;
}
