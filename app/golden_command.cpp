// `dflash golden generate [--case NAME] --out DIR`: runs the reference on the golden cases and
// writes one golden file per case (SPEC §9).
// `dflash golden check [--impl NAME] [--dir DIR]`: recomputes every golden in DIR from its stored
// inputs with an implementation and prints a table; exits 1 if any tensor fails.
// `generate-training` / `check-training`: the same for training goldens (golden/training_golden.hpp).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "golden/golden_cases.hpp"
#include "golden/golden_check.hpp"
#include "golden/training_golden.hpp"
#if DFLASH_WITH_CUDA
#include "cuda/loss_head_golden.hpp"
#endif

namespace dflash::app {

namespace {

// What --impl can select. Another implementation (the CUDA loss head) is one more entry.
std::vector<GoldenImplementation> golden_implementations() {
  return {reference_golden_implementation(), reference_loss_head_golden_implementation(),
#if DFLASH_WITH_CUDA
          cuda_loss_head_golden_implementation(),
#endif
  };
}

void add_generate(CLI::App& golden) {
  auto* cmd = golden.add_subcommand("generate", "Run the reference on the golden cases and write one file per case");
  auto case_name = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  std::string cases;
  for (const GoldenCase& c : golden_cases()) cases += (cases.empty() ? "" : ", ") + c.name;
  cmd->add_option("--case", *case_name, "Only this case (" + cases + "); default: all");
  cmd->add_option("--out", *out, "Directory to write <case>.safetensors into (created if missing)")->required();
  cmd->callback([case_name, out] {
    std::vector<const GoldenCase*> selected;
    if (case_name->empty()) {
      for (const GoldenCase& c : golden_cases()) selected.push_back(&c);
    } else {
      selected.push_back(&golden_case(*case_name));
    }
    std::filesystem::create_directories(*out);
    for (const GoldenCase* c : selected) {
      const std::filesystem::path path = std::filesystem::path(*out) / golden_file_name(c->name);
      write_golden(generate_golden(*c), path);
      std::cout << "wrote " << path.string() << " (" << std::filesystem::file_size(path) << " bytes)\n";
    }
  });
}

void add_check(CLI::App& golden, int& exit_code) {
  auto* cmd = golden.add_subcommand("check", "Recompute every golden in a directory and compare, tensor by tensor");
  auto impl = std::make_shared<std::string>("reference");
  auto dir = std::make_shared<std::string>(default_golden_dir().string());
  std::vector<std::string> names;
  std::string help = "Implementation to check:";
  for (const GoldenImplementation& i : golden_implementations()) {
    names.push_back(i.name);
    help += "\n  " + i.name + ": " + i.description;
  }
  cmd->add_option("--impl", *impl, help)->check(CLI::IsMember(names))->capture_default_str();
  cmd->add_option("--dir", *dir, "Directory of goldens ($DFLASH_GOLDEN_DIR, else the source tree's golden/data)")
      ->capture_default_str();
  cmd->callback([impl, dir, &exit_code] {
    const std::vector<std::filesystem::path> files = golden_files_in(*dir);
    GoldenImplementation chosen;
    for (GoldenImplementation& i : golden_implementations()) {
      if (i.name == *impl) chosen = std::move(i);
    }
    std::cout << "dflash golden check: " << files.size() << " goldens in " << *dir << ", implementation "
              << chosen.name << " (" << chosen.description << ")\n";
    std::vector<GoldenCheckRow> rows;
    for (const std::filesystem::path& f : files) {
      for (GoldenCheckRow& r : check_golden_file(f, chosen)) {
        if (r.tensor == "(file)") std::cerr << "dflash golden check: " << f.string() << ": " << r.note << "\n";
        rows.push_back(std::move(r));
      }
    }
    exit_code = print_golden_check_table(std::cout, rows) > 0 ? 1 : 0;
  });
}

// What check-training --impl can select (one entry per training backend).
std::vector<TrainingGoldenImplementation> training_golden_implementations() {
  return {reference_training_golden_implementation()};
}

void add_generate_training(CLI::App& golden) {
  auto* cmd = golden.add_subcommand("generate-training", "Run the reference training core on the training golden "
                                                         "cases and write one file per case");
  auto out = std::make_shared<std::string>();
  cmd->add_option("--out", *out, "Directory to write <case>.safetensors into (created if missing)")->required();
  cmd->callback([out] {
    std::filesystem::create_directories(*out);
    for (const TrainingGoldenCase& c : training_golden_cases()) {
      const std::filesystem::path path = std::filesystem::path(*out) / golden_file_name(c.name);
      write_training_golden(generate_training_golden(c), path);
      std::cout << "wrote " << path.string() << " (" << std::filesystem::file_size(path) << " bytes)\n";
    }
  });
}

void add_check_training(CLI::App& golden, int& exit_code) {
  auto* cmd = golden.add_subcommand("check-training", "Recompute every training golden in a directory (optimizer "
                                                      "steps, TRAINING §11-§13) and compare, tensor by tensor");
  auto impl = std::make_shared<std::string>("reference");
  auto dir = std::make_shared<std::string>(default_training_golden_dir().string());
  std::vector<std::string> names;
  std::string help = "Implementation to check:";
  for (const TrainingGoldenImplementation& i : training_golden_implementations()) {
    names.push_back(i.name);
    help += "\n  " + i.name + ": " + i.description;
  }
  cmd->add_option("--impl", *impl, help)->check(CLI::IsMember(names))->capture_default_str();
  cmd->add_option("--dir", *dir, "Directory of training goldens (default: golden/data/training)")->capture_default_str();
  cmd->callback([impl, dir, &exit_code] {
    const std::vector<std::filesystem::path> files = golden_files_in(*dir);
    TrainingGoldenImplementation chosen;
    for (TrainingGoldenImplementation& i : training_golden_implementations()) {
      if (i.name == *impl) chosen = std::move(i);
    }
    std::cout << "dflash golden check-training: " << files.size() << " training goldens in " << *dir
              << ", implementation " << chosen.name << " (" << chosen.description << ")\n";
    std::vector<GoldenCheckRow> rows;
    for (const std::filesystem::path& f : files) {
      for (GoldenCheckRow& r : check_training_golden_file(f, chosen)) {
        if (r.tensor == "(file)") std::cerr << "dflash golden check-training: " << f.string() << ": " << r.note << "\n";
        rows.push_back(std::move(r));
      }
    }
    exit_code = print_golden_check_table(std::cout, rows) > 0 ? 1 : 0;
  });
}

}  // namespace

void add_golden_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("golden", "Golden files (SPEC §9): generate them with the reference, check an "
                                           "implementation against them");
  cmd->require_subcommand(1);
  add_generate(*cmd);
  add_check(*cmd, exit_code);
  add_generate_training(*cmd);
  add_check_training(*cmd, exit_code);
}

}  // namespace dflash::app
