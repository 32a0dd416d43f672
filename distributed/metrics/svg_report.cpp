#include "distributed/metrics/svg_report.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

#include "io/errors.hpp"
#include "io/file_limits.hpp"
#include "io/file_read.hpp"
#include "io/file_write.hpp"
#include "io/strict_json.hpp"

namespace dflash {

namespace {

// A step record nests two levels (peak_bytes, accuracy_by_position).
constexpr std::size_t kMaxRecordJsonDepth = 4;

}  // namespace

std::vector<StepRecord> read_metrics_file(const std::filesystem::path& path) {
  std::istringstream in(read_regular_file(path, kMaxMetricsFileBytes));
  std::map<std::int64_t, StepRecord> by_step;
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = safetensors::parse_strict_json(line, str(path.string(), " line ", n), kMaxRecordJsonDepth);
    } catch (const InputError& e) {
      throw_input_error(str(path.string(), " line ", n), str("is not JSON (or not strict JSON): ", e.what()));
    }
    try {
      StepRecord r = step_record_from_json(j);
      by_step[r.step] = std::move(r);
    } catch (const InputError& e) {
      throw_input_error(str(path.string(), " line ", n), e.what());
    }
  }
  std::vector<StepRecord> out;
  for (auto& [step, r] : by_step) out.push_back(std::move(r));
  return out;
}

void truncate_metrics_file(const std::filesystem::path& path, std::int64_t step) {
  std::error_code absent;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, absent))) return;
  std::istringstream in(read_regular_file(path, kMaxMetricsFileBytes));
  std::string kept, line;
  while (std::getline(in, line)) {
    // A line that is not a record (the part of one an older build could leave) is dropped.
    nlohmann::json j;
    try {
      j = safetensors::parse_strict_json(line, path.string(), kMaxRecordJsonDepth);
    } catch (const InputError&) {
      continue;
    }
    if (j.is_object() && j.contains("step") && j.at("step").is_number_integer() &&
        j.at("step").get<std::int64_t>() < step) {
      kept += line + "\n";
    }
  }
  write_file_atomically(path, kept);
}

namespace {

constexpr double kWidth = 720, kPanelHeight = 180, kLeft = 70, kRight = 20, kTop = 40, kGap = 50;

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// One panel: the series against step, with its range on the axes.
void panel(std::ostringstream& svg, const std::vector<StepRecord>& records, int index, const std::string& label,
           const std::string& colour, const std::function<double(const StepRecord&)>& value) {
  const double top = kTop + index * (kPanelHeight + kGap), plot_w = kWidth - kLeft - kRight;
  double lo = value(records.front()), hi = lo;
  for (const StepRecord& r : records) {
    lo = std::min(lo, value(r));
    hi = std::max(hi, value(r));
  }
  // Where v lies between lo and hi, in [0, 1]: in halves, since hi - lo of two finite doubles can
  // overflow (1e308 - -1e308) while hi/2 - lo/2 cannot. A flat series is drawn half way up.
  const double half_span = hi / 2 - lo / 2;
  const auto height_of = [&](double v) { return half_span > 0 ? (v / 2 - lo / 2) / half_span : 0.5; };
  const double s0 = double(records.front().step), s1 = std::max(double(records.back().step), s0 + 1);
  svg << "<text x='" << kLeft << "' y='" << top - 8 << "' font-size='14'>" << label << "</text>\n";
  svg << "<rect x='" << kLeft << "' y='" << top << "' width='" << plot_w << "' height='" << kPanelHeight
      << "' fill='none' stroke='#888'/>\n";
  svg << "<text x='" << kLeft - 6 << "' y='" << top + 10 << "' font-size='11' text-anchor='end'>" << number(hi)
      << "</text>\n";
  svg << "<text x='" << kLeft - 6 << "' y='" << top + kPanelHeight << "' font-size='11' text-anchor='end'>"
      << number(lo) << "</text>\n";
  svg << "<text x='" << kLeft << "' y='" << top + kPanelHeight + 14 << "' font-size='11'>step " << records.front().step
      << "</text>\n";
  svg << "<text x='" << kLeft + plot_w << "' y='" << top + kPanelHeight + 14
      << "' font-size='11' text-anchor='end'>step " << records.back().step << "</text>\n";
  svg << "<polyline fill='none' stroke='" << colour << "' stroke-width='1.5' points='";
  for (const StepRecord& r : records) {
    const double x = kLeft + plot_w * (double(r.step) - s0) / (s1 - s0);
    const double y = top + kPanelHeight * (1 - height_of(value(r)));
    svg << number(x) << "," << number(y) << " ";
  }
  svg << "'/>\n";
}

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '\'')
      out += "&apos;";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string metrics_svg(const std::vector<StepRecord>& records, const std::string& title) {
  if (records.empty()) throw_input_error("metrics", "hold no step to draw");
  const double height = kTop + 3 * (kPanelHeight + kGap);
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth << "' height='" << height
      << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  svg << "<text x='" << kLeft << "' y='18' font-size='15' font-weight='bold'>" << escaped(title) << "</text>\n";
  panel(svg, records, 0, "loss", "#c0392b", [](const StepRecord& r) { return r.loss; });
  panel(svg, records, 1, "accuracy", "#2471a3", [](const StepRecord& r) { return r.accuracy; });
  panel(svg, records, 2, "tokens/s", "#1e8449", [](const StepRecord& r) { return r.tokens_per_s; });
  svg << "</svg>\n";
  return svg.str();
}

std::filesystem::path write_metrics_report(const std::filesystem::path& run_dir, const std::filesystem::path& out) {
  const std::vector<StepRecord> records = read_metrics_file(run_dir / "metrics.jsonl");
  const std::filesystem::path path = out.empty() ? run_dir / "report.svg" : out;
  if (records.empty()) throw_input_error((run_dir / "metrics.jsonl").string(), "holds no step record to draw");
  write_file_atomically(path, metrics_svg(records, str("dflash run ", run_dir.string(), ": steps ",
                                                       records.front().step, "..", records.back().step)));
  return path;
}

}  // namespace dflash
