// The dflash subcommands. Each lives in its own file and registers itself on the app; a command
// reports failure by setting exit_code (non-zero) from its callback.
#pragma once

#include <CLI/CLI.hpp>

namespace dflash::app {

void add_verify_command(CLI::App& app, int& exit_code);
void add_golden_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);
void add_train_command(CLI::App& app, int& exit_code);
void add_data_command(CLI::App& app, int& exit_code);
void add_export_command(CLI::App& app, int& exit_code);
void add_report_command(CLI::App& app, int& exit_code);

}  // namespace dflash::app
