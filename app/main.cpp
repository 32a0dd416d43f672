// dflash: verification matrix, golden files and memory plans for DFlash drafter training.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "app/commands.hpp"
#include "reference/threads.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dflash: verified DFlash drafter training steps (reference, golden files, memory plans)"};
  app.require_subcommand(1);
  int exit_code = 0;
  // Before any subcommand runs (trigger_on_parse): the thread count changes speed, never results.
  app.add_option_function<int>(
         "--threads", [](int threads) { dflash::set_reference_threads(threads); },
         "threads of the double reference (default: DFLASH_THREADS, else 1); results do "
         "not depend on it")
      ->check(CLI::PositiveNumber)
      ->trigger_on_parse();
  dflash::app::add_verify_command(app, exit_code);
  dflash::app::add_golden_command(app, exit_code);
  dflash::app::add_plan_command(app, exit_code);
  dflash::app::add_train_command(app, exit_code);
  dflash::app::add_data_command(app, exit_code);
  dflash::app::add_export_command(app, exit_code);
  dflash::app::add_report_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // Bad input (configs, files, flags) surfaces here with a message naming what is wrong.
    std::cerr << "dflash: error: " << e.what() << "\n";
    return 2;
  }
  return exit_code;
}
