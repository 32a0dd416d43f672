// `dflash report RUN/`: loss, accuracy and tokens/s against step, drawn from RUN/metrics.jsonl
// alone as an SVG a browser opens (three stacked panels, axes labelled with their ranges).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "distributed/metrics/step_record.hpp"

namespace dflash {

// The records of a metrics.jsonl, by step (a step logged twice, by a run resumed from an earlier
// checkpoint, keeps its last record). Throws dflash::InputError naming the file and line.
std::vector<StepRecord> read_metrics_file(const std::filesystem::path& path);

// Keeps only the records of steps < `step` (a resumed run re-logs the steps after its checkpoint).
void truncate_metrics_file(const std::filesystem::path& path, std::int64_t step);

std::string metrics_svg(const std::vector<StepRecord>& records, const std::string& title);

// Reads <run>/metrics.jsonl, writes <run>/report.svg (or `out`), returns the path written.
std::filesystem::path write_metrics_report(const std::filesystem::path& run_dir, const std::filesystem::path& out = {});

}  // namespace dflash
