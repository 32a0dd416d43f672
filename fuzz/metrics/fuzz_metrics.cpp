// libFuzzer target for a run's metrics.jsonl (distributed/metrics/svg_report.hpp): the bytes are
// written as metrics.jsonl and read as `dflash report` reads it (read_metrics_file); the records
// it yields are drawn (metrics_svg), as report does whenever there is at least one (it refuses a
// file with none). Records come back sorted by step, one per step, and the drawing holds no
// non-finite number (issue 22, class 15: +-1e308 drew -nan coordinates). The only acceptable failure is
// dflash::InputError; a crash, a sanitizer report or any other exception is a finding. Built and
// run by `ci/fuzz metrics`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "distributed/metrics/svg_report.hpp"
#include "fuzz/scratch_dir.hpp"
#include "io/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = dflash::fuzz::scratch_dir() / "metrics.jsonl";
  dflash::fuzz::write_bytes(path, data, size);
  try {
    const std::vector<dflash::StepRecord> records = dflash::read_metrics_file(path);
    for (std::size_t i = 1; i < records.size(); ++i) {
      if (records[i - 1].step >= records[i].step) std::abort();  // not sorted, or a step twice
    }
    if (!records.empty()) {
      const std::string svg = dflash::metrics_svg(records, "fuzz");
      if (svg.rfind("<svg", 0) != 0) std::abort();
      if (svg.find("nan") != std::string::npos || svg.find("inf") != std::string::npos) std::abort();
    }
  } catch (const dflash::InputError&) {
    // Refused, naming the file and the line: the expected outcome for most bytes.
  }
  return 0;
}
