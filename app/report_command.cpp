// `dflash report RUN [--out FILE]`: loss, accuracy and tokens/s against step as an SVG, from
// RUN/metrics.jsonl alone.
#include <iostream>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "distributed/metrics/svg_report.hpp"

namespace dflash::app {

void add_report_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("report", "Draw a run's metrics.jsonl (loss, accuracy, tokens/s vs step) as an SVG");
  auto run = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  cmd->add_option("run", *run, "Run directory (holding metrics.jsonl)")->required();
  cmd->add_option("--out", *out, "SVG file to write (default RUN/report.svg)");
  cmd->callback([run, out, &exit_code] {
    const auto path = write_metrics_report(*run, *out);
    std::cout << "dflash report: wrote " << path.string() << "\n";
    exit_code = 0;
  });
}

}  // namespace dflash::app
