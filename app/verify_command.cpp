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
  cmd->add_option("--group", *group, "Only run rows of this group (loss_head, drafter, ...)");
  auto device = std::make_shared<std::string>("cpu");
  cmd->add_option("--device", *device, "cpu: the CPU rows; cuda: also the CUDA loss head's rows (group cuda)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->callback([group, device, &exit_code] {
    std::vector<VerifyRow> rows;
    auto want = [&](const char* g) { return group->empty() || *group == g; };
    if (want("loss_head")) {
      const auto part = verify_loss_head_rows();
      rows.insert(rows.end(), part.begin(), part.end());
    }
    if (want("drafter")) {
      const auto part = verify_drafter_rows();
      rows.insert(rows.end(), part.begin(), part.end());
    }
    if (want("golden")) {
      const auto part = verify_golden_rows();
      rows.insert(rows.end(), part.begin(), part.end());
    }
    if (*device == "cuda" && want("cuda")) {
#if DFLASH_WITH_CUDA
      const auto part = verify_cuda_rows();
#else
      const std::vector<VerifyRow> part = {skipped_row({.group = "cuda", .case_name = "-", .variant = "-"},
                                                       "this dflash was built without CUDA (no nvcc at configure time)")};
#endif
      rows.insert(rows.end(), part.begin(), part.end());
      if (!part.empty() && part.front().skipped) {
        std::cerr << "dflash verify: CUDA rows SKIPPED (" << part.front().note
                  << "); the exit code reflects the CPU rows only\n";
      }
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
