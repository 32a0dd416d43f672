// `dflash verify`: runs the verification matrix and prints one row per check.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "common/gpu_required.hpp"
#include "verify/rows.hpp"

namespace dflash::app {

void add_verify_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("verify", "Run the verification matrix and print a PASS/FAIL table");
  auto groups = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--group", *groups, "Only run rows of these groups (loss_head, drafter, golden, cuda; repeatable)")
      ->delimiter(',');
  auto device = std::make_shared<std::string>("cpu");
  cmd->add_option("--device", *device,
                  "cpu: the CPU rows; cuda: also the CUDA loss head's and step's rows (group cuda)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->callback([groups, device, &exit_code] {
    std::vector<VerifyRow> rows;
    auto want = [&](const char* g) { return groups->empty() || std::ranges::count(*groups, g) > 0; };
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
      std::vector<VerifyRow> part = verify_cuda_rows();
      const std::vector<VerifyRow> step = verify_cuda_step_rows();
      part.insert(part.end(), step.begin(), step.end());
#else
      const std::vector<VerifyRow> part = {
          skipped_row({.group = "cuda", .case_name = "-", .variant = "-"},
                      "this dflash was built without CUDA (no nvcc at configure time)")};
#endif
      rows.insert(rows.end(), part.begin(), part.end());
    }
    for (const std::string& g : *groups) {
      if (std::ranges::none_of(rows, [&](const VerifyRow& r) { return r.group == g; })) {
        std::cerr << "dflash verify: no rows for group '" << g << "'"
                  << (g == "cuda" && *device != "cuda" ? " (the cuda rows need --device cuda)" : "") << "\n";
        exit_code = 2;
        return;
      }
    }
    const int failed = print_verify_table(std::cout, rows);
    exit_code = failed > 0 ? 1 : 0;

    // A skipped row is neither a pass nor a failure, except where a GPU must be usable.
    const auto skipped = std::ranges::find_if(rows, [](const VerifyRow& r) { return r.skipped; });
    if (skipped == rows.end()) return;
    const auto count = std::ranges::count_if(rows, [](const VerifyRow& r) { return r.skipped; });
    if (gpu_required()) {
      std::cerr << "dflash verify: DFLASH_REQUIRE_GPU=1, but " << count << " rows were SKIPPED (" << skipped->note
                << "): failing\n";
      exit_code = 1;
    } else {
      std::cerr << "dflash verify: " << count << " rows SKIPPED (" << skipped->note
                << "); the exit code reflects the other rows only (DFLASH_REQUIRE_GPU=1 makes a skip a failure)\n";
    }
  });
}

}  // namespace dflash::app
