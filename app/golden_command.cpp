// `dflash golden generate [--case NAME] --out DIR`: runs the reference on the golden cases and
// writes one golden file per case (SPEC §9).
// `dflash golden generate --config FILE --out FILE.safetensors [--sequences N] ...`: one golden at
// the user's config and shape, after an estimate of its cost (refused above the budget unless
// --force), with a progress line while the reference runs; `--weights DIR` takes its parameters
// from a Hugging Face drafter directory (exported or released) instead of the seeded init.
// `dflash golden compare --golden FILE --result FILE [--rule R] [--json]`: judges a result file
// written by any implementation; exits 0 when every tensor passes, 1 when any fails, 2 for a file
// that cannot be read.
// `dflash golden check [--impl NAME] [--dir DIR]`: recomputes every golden in DIR from its stored
// inputs with an implementation and prints a table; exits 1 if any tensor fails. A GPU
// implementation (cuda-loss-head, cuda) without a usable GPU: SKIPPED with the reason, exit 0 (1
// under DFLASH_REQUIRE_GPU=1).
// `generate-training` / `check-training [--impl reference|cuda]`: the same for training goldens
// (golden/training.hpp); --impl cuda without a usable GPU as `check --impl cuda`.
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "app/commands.hpp"
#include "golden/cases.hpp"
#include "golden/check.hpp"
#include "golden/compare.hpp"
#include "golden/request.hpp"
#include "golden/training.hpp"
#include "planner/memory_size.hpp"
#include "reference/drafter_config.hpp"
#if DFLASH_WITH_CUDA
#include "common/gpu_required.hpp"
#include "cuda/runtime/device_probe.hpp"
#include "golden/cuda/loss_head_check.hpp"
#include "golden/cuda/step_check.hpp"
#endif
#if DFLASH_WITH_CUDA_TRAINING_GOLDEN
#include "golden/cuda/training_check.hpp"
#endif

namespace dflash::app {

namespace {

// Without a GPU a GPU implementation is neither passed nor failed, except where one must be usable
// (DFLASH_REQUIRE_GPU=1: exit 1): true when `dflash <command>` must stop here, having said why.
bool skipped_without_gpu(std::string_view command, const std::string& impl, bool needs_gpu, int& exit_code) {
#if DFLASH_WITH_CUDA
  const CudaDeviceStatus& gpu = cuda_device_status();
  if (!needs_gpu || gpu.available) return false;
  if (gpu_required()) {
    std::cerr << "dflash " << command << ": DFLASH_REQUIRE_GPU=1, but --impl " << impl << " has no GPU: " << gpu.reason
              << ": failing\n";
    exit_code = 1;
  } else {
    std::cout << "dflash " << command << ": SKIPPED (no golden checked): --impl " << impl
              << " needs a GPU: " << gpu.reason << " (DFLASH_REQUIRE_GPU=1 makes this a failure)\n";
  }
  return true;
#else
  (void)command, (void)impl, (void)exit_code;
  return needs_gpu;  // unreachable: no GPU implementation is listed in a build without CUDA
#endif
}

// What --impl can select. Another implementation (the CUDA loss head) is one more entry.
std::vector<GoldenImplementation> golden_implementations() {
  return {
    reference_golden_implementation(), reference_loss_head_golden_implementation(),
#if DFLASH_WITH_CUDA
        cuda_loss_head_golden_implementation(), cuda_drafter_step_golden_implementation(),
#endif
  };
}

// While a long generation runs: "golden generate: 20 s of about 41 s" on stderr every 10 s.
class ProgressLine {
 public:
  explicit ProgressLine(double estimated_seconds)
      : thread_([estimated_seconds](std::stop_token stop) {
          const auto start = std::chrono::steady_clock::now();
          std::mutex m;
          std::condition_variable_any wake;
          std::unique_lock lock(m);
          while (true) {
            wake.wait_for(lock, stop, std::chrono::seconds(10), [] { return false; });  // wakes early on stop
            if (stop.stop_requested()) return;
            const auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::cerr << "golden generate: " << std::lround(elapsed) << " s of about " << std::lround(estimated_seconds)
                      << " s\n";
          }
        }) {}

 private:
  std::jthread thread_;
};

struct RequestFlags {
  std::string config, out, case_name, weights;
  GoldenRequest request;
  std::optional<std::uint64_t> seed;
  std::optional<double> attention_dropout, hidden_dropout;
  std::int64_t step = 0;
  bool force = false;
};

void generate_request(const RequestFlags& f) {
  GoldenRequest r = f.request;
  r.config = load_drafter_config(f.config);
  r.case_name = f.case_name.empty() ? std::filesystem::path(f.config).stem().string() : f.case_name;
  r.seed = f.seed;
  r.attention_dropout = f.attention_dropout;
  r.hidden_dropout = f.hidden_dropout;
  if (f.step < 0 || f.step > std::int64_t(UINT32_MAX)) throw_input_error("--step", str(f.step, " is not in [0, 2^32)"));
  r.step = static_cast<std::uint32_t>(f.step);
  if (!f.weights.empty()) r.weights = f.weights;
  const GoldenCase c = golden_request_case(r);
  const GoldenCostEstimate estimate = estimate_golden_cost(c);
  std::cout << "golden generate: case " << c.name << ", " << c.batch.sequences
            << " sequences x S = " << c.batch.context_length << ", N x B = " << c.config.max_anchors << " x "
            << c.config.block_size << ", seed " << c.config.seed << ", step " << c.step
            << (c.weights ? ", parameters from " + c.weights->string() : std::string()) << ": "
            << describe_estimate(estimate) << " (budget " << kGenerateSecondsBudget << " s, "
            << gib_string(kGenerateBytesBudget) << " GiB)\n"
            << std::flush;
  if (const auto why = over_budget(estimate); why && !f.force) {
    throw_input_error("golden generate", *why + "; use a smaller --sequences or --context, or --force");
  }
  const auto start = std::chrono::steady_clock::now();
  std::optional<Golden> golden;
  {
    ProgressLine progress(estimate.seconds);
    golden.emplace(generate_golden(c));
  }
  write_golden(*golden, f.out);
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "wrote " << f.out << " (" << std::filesystem::file_size(f.out) << " bytes) in " << std::lround(seconds)
            << " s\n";
}

void add_generate(CLI::App& golden) {
  auto* cmd = golden.add_subcommand("generate",
                                    "Run the reference on the golden cases and write one file per case, "
                                    "or (--config) one golden at your own config and shape");
  auto case_name = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto f = std::make_shared<RequestFlags>();
  std::string cases;
  for (const GoldenCase& c : golden_cases()) cases += (cases.empty() ? "" : ", ") + c.name;
  cmd->add_option("--case", *case_name,
                  "Only this built-in case (" + cases +
                      "); default: all. With --config: the case name written "
                      "into the golden (default: the config file's stem)");
  cmd->add_option("--out", *out,
                  "Directory to write <case>.safetensors into (created if missing); with --config, "
                  "the golden file to write")
      ->required();
  auto* config = cmd->add_option("--config", f->config, "Drafter config.json (SPEC §1): generate one golden at it");
  auto* user = cmd->add_option_group("user shape", "Only with --config");
  user->add_option("--sequences", f->request.sequences, "Sequences nseq")->capture_default_str();
  user->add_option("--context", f->request.context, "Context length S (default: block_size x max_anchors)");
  user->add_option("--seed", f->seed, "RNG and data seed (default: the config's seed)");
  user->add_option("--step", f->step, "Optimizer step, the RNG counter's last word")->capture_default_str();
  user->add_option("--attention-dropout", f->attention_dropout, "Attention dropout p (default: the config's)");
  user->add_option("--hidden-dropout", f->hidden_dropout, "Hidden dropout p (default: the config's)");
  user->add_option("--weights", f->weights,
                   "Hugging Face drafter directory (config.json + model.safetensors, from `dflash export` or "
                   "released): the parameters, instead of the seeded init; its config.json must agree with "
                   "--config's model fields. The golden's case records each weight file's sha256");
  user->add_flag("--force", f->force, "Generate even if the estimate is over the time or memory budget");
  for (CLI::Option* o : user->get_options()) o->needs(config);
  cmd->callback([case_name, out, f] {
    if (!f->config.empty()) {
      f->out = *out;
      f->case_name = *case_name;
      generate_request(*f);
      return;
    }
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

void add_compare(CLI::App& golden, int& exit_code) {
  auto* cmd = golden.add_subcommand("compare",
                                    "Judge a result file written by any implementation (output/ and grad/ "
                                    "tensors, F64, F32 or BF16) against a golden, tensor by tensor");
  auto golden_path = std::make_shared<std::string>();
  auto result_path = std::make_shared<std::string>();
  auto rule = std::make_shared<std::string>("exact");
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--golden", *golden_path, "The golden file")->required();
  cmd->add_option("--result", *result_path, "Your results: safetensors, the golden's output/ and grad/ names")
      ->required();
  cmd->add_option("--rule", *rule,
                  "Precision the results claim (SPEC §10): exact (double, 1e-12), fp32 or bf16 (loss head: 2 x a plain "
                  "computation's error + 1e-5; the rest: golden/compare_rules.hpp)")
      ->check(CLI::IsMember({"exact", "fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--json", *json, "Print the report as JSON instead of a table");
  cmd->callback([golden_path, result_path, rule, json, &exit_code] {
    const Golden g = read_golden(*golden_path);
    const ResultFile result = read_result_file(*result_path);
    const CompareReport report = compare_results(g, result, *compare_rule_from_name(*rule));
    if (*json) {
      std::cout << compare_report_json(report).dump(2) << "\n";
    } else {
      std::cout << "dflash golden compare: " << *result_path << " against " << *golden_path << " (case "
                << report.golden_case << "), rule " << *rule << "\n";
      print_compare_report(std::cout, report);
    }
    exit_code = report.passed() ? 0 : 1;
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
    std::cout << "dflash golden check: " << files.size() << " goldens in " << *dir << ", implementation " << chosen.name
              << " (" << chosen.description << ")\n";
    if (skipped_without_gpu("golden check", chosen.name, chosen.needs_gpu, exit_code)) return;
    std::vector<GoldenCheckRow> rows;
    for (const std::filesystem::path& f : files) {
      std::string case_name;
      for (GoldenCheckRow& r : check_golden_file(f, chosen, &case_name)) {
        if (r.tensor == "(file)") std::cerr << "dflash golden check: " << f.string() << ": " << r.note << "\n";
        rows.push_back(std::move(r));
      }
      // What each golden is of: a golden made at a user's weights names their files and sha256.
      if (!case_name.empty()) std::cout << "  " << f.filename().string() << ": case " << case_name << "\n";
    }
    exit_code = print_golden_check_table(std::cout, rows) > 0 ? 1 : 0;
  });
}

// What check-training --impl can select (one entry per training backend).
std::vector<TrainingGoldenImplementation> training_golden_implementations() {
  return {
    reference_training_golden_implementation(),
#if DFLASH_WITH_CUDA_TRAINING_GOLDEN
        cuda_training_golden_implementation(),
#endif
  };
}

void add_generate_training(CLI::App& golden) {
  auto* cmd = golden.add_subcommand("generate-training",
                                    "Run the reference training core on the training golden "
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
  auto* cmd = golden.add_subcommand("check-training",
                                    "Recompute every training golden in a directory (optimizer "
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
  cmd->add_option("--dir", *dir, "Directory of training goldens (default: golden/data/training)")
      ->capture_default_str();
  cmd->callback([impl, dir, &exit_code] {
    const std::vector<std::filesystem::path> files = golden_files_in(*dir);
    TrainingGoldenImplementation chosen;
    for (TrainingGoldenImplementation& i : training_golden_implementations()) {
      if (i.name == *impl) chosen = std::move(i);
    }
    std::cout << "dflash golden check-training: " << files.size() << " training goldens in " << *dir
              << ", implementation " << chosen.name << " (" << chosen.description << ")\n";
    if (skipped_without_gpu("golden check-training", chosen.name, chosen.needs_gpu, exit_code)) return;
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
  auto* cmd = app.add_subcommand("golden",
                                 "Golden files (SPEC §9): generate them with the reference, check an "
                                 "implementation against them");
  cmd->require_subcommand(1);
  add_generate(*cmd);
  add_check(*cmd, exit_code);
  add_generate_training(*cmd);
  add_check_training(*cmd, exit_code);
  add_compare(*cmd, exit_code);
}

}  // namespace dflash::app
