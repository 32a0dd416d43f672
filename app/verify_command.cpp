// `dflash verify`: runs the verification matrix and prints one row per check.
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "verify/verify_rows.hpp"

namespace dflash::app {

void add_verify_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("verify", "Run the verification matrix and print a PASS/FAIL table");
  auto group = std::make_shared<std::string>();
  cmd->add_option("--group", *group, "Only run rows of this group (loss_head, ...)");
  cmd->callback([group, &exit_code] {
    std::vector<VerifyRow> rows;
    auto want = [&](const char* g) { return group->empty() || *group == g; };
    if (want("loss_head")) {
      const auto part = verify_loss_head_rows();
      rows.insert(rows.end(), part.begin(), part.end());
    }
    if (rows.empty()) {
      std::cerr << "dflash verify: no rows for group '" << *group << "'\n";
      exit_code = 2;
      return;
    }
    const int failed = print_verify_table(std::cout, rows);
    exit_code = failed > 0 ? 1 : 0;
  });
}

}  // namespace dflash::app
