#include "distributed/metrics/svg_report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "io/errors.hpp"

namespace dflash {

std::vector<StepRecord> read_metrics_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw_input_error(path.string(), "is missing or unreadable");
  std::map<std::int64_t, StepRecord> by_step;
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) throw_input_error(str(path.string(), " line ", n), "is not JSON");
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
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j.at("step").is_number_integer() &&
        j.at("step").get<std::int64_t>() < step) {
      kept += line + "\n";
    }
  }
  in.close();
  const auto tmp = path.string() + ".tmp";
  std::ofstream(tmp, std::ios::trunc) << kept;
  std::filesystem::rename(tmp, path);
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
  if (hi == lo) hi = lo + 1;
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
    const double y = top + kPanelHeight * (1 - (value(r) - lo) / (hi - lo));
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
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << metrics_svg(records,
                     str("dflash run ", run_dir.string(), ": steps ", records.front().step, "..", records.back().step));
    if (!f.flush()) throw std::runtime_error(str("cannot write ", tmp));
  }
  std::filesystem::rename(tmp, path);
  return path;
}

}  // namespace dflash
