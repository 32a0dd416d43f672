// The double reference beside PyTorch float64 on the same inputs, in one run (issue 14):
//   loss_head  H 256, V 32000, T 2048, materialize: forward + dL/dY (3 V-wide products)
//   drafter    configs/mid.json, one sequence of S 512: one step (forward, loss, every gradient and
//              dL/dF), trunk `none` and loss `materialize`, so that it does the work autograd does
// Each case: the reference R times on one thread and R times on --threads threads, then
// bench/reference/torch_reference.py R times on one thread in a child process, reading the inputs
// this program wrote. Reported: CPU seconds (user + system of the process, getrusage / process_time:
// what a loaded machine does not inflate much, unlike wall time), the reference's system seconds
// and minor page faults per run, wall seconds, the CPU ratio
// torch / reference (>= 1: the reference is at least as fast), the wall ratio N threads / 1
// thread and the main thread's CPU time on N threads over the 1-thread CPU time (that ratio's
// estimate on a loaded machine, where wall times measure the scheduler), the load average before and after, and how far torch's loss and gradients are from the
// reference's (the check that both computed the same thing). Without python3-torch the torch
// columns say why they are missing and the reference is still timed.
//
//   build/bench/reference/bench_reference_vs_torch --python /usr/bin/python3 --json out.json
//
// --check (the CI test reference_vs_torch_check): small shapes (the loss head at T 96, H 16, V 200
// with tau 0.7 and hard/soft 0.6/0.4; the drafter at configs/tiny.json, S 40), one repeat, and an
// exit code: 0 when torch's loss and every gradient are within kReferenceTolerance of the
// reference's and the reference is bitwise the same on 1 and N threads, 1 when not or when the
// script fails, 77 only when torch cannot be imported (the script's exit 3). That makes torch_reference.py, which the PyTorch peers' CPU checks
// (tests/bench/*_torch_check.py) take as their oracle, the reference's twin in every CI run.
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/tolerances.hpp"
#include "io/file_write.hpp"
#include "reference/drafter.hpp"
#include "reference/drafter_problem.hpp"
#include "reference/linalg.hpp"
#include "reference/loss_head.hpp"
#include "reference/loss_head_problem.hpp"
#include "reference/threads.hpp"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Settings {
  int repeats = 3;
  int threads = 2;
  std::string python = "python3";
  std::string script = DFLASH_SOURCE_DIR "/bench/reference/torch_reference.py";
  std::string work;
  bool check = false;  // small shapes and a verdict (the header)
};

double seconds(const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); }

// User + system seconds of the process (RUSAGE_SELF) or of the calling thread (RUSAGE_THREAD).
double cpu_seconds(int who = RUSAGE_SELF) {
  rusage u{};
  getrusage(who, &u);
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

json load_average() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return nullptr;
  return {load[0], load[1], load[2]};
}

// System seconds and minor page faults of the process so far: what the kernel spends mapping and
// zeroing fresh pages (the cost the reference's storage pool removes), which load does not inflate.
rusage self_usage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u;
}

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// Times `step` `repeats` times on `threads` threads. step(tracker) computes one step and returns
// its result; read(result, grads) returns the loss and copies the gradients out after the clocks
// stop, as torch_reference.py reads torch's out untimed.
template <class Step, class Read>
json time_reference(int threads, int repeats, const Step& step, const Read& read, std::vector<double>& grads,
                    double& loss) {
  set_reference_threads(threads);
  std::vector<double> cpu, main_cpu, wall, system;
  std::vector<long> faults;
  for (int r = 0; r < repeats; ++r) {
    MemoryTracker tracker;
    const double c0 = cpu_seconds(), m0 = cpu_seconds(RUSAGE_THREAD);
    const rusage u0 = self_usage();
    const auto w0 = std::chrono::steady_clock::now();
    const auto result = step(tracker);
    cpu.push_back(cpu_seconds() - c0);
    main_cpu.push_back(cpu_seconds(RUSAGE_THREAD) - m0);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
    const rusage u1 = self_usage();
    system.push_back(seconds(u1.ru_stime) - seconds(u0.ru_stime));
    faults.push_back(u1.ru_minflt - u0.ru_minflt);
    loss = read(result, grads);
  }
  return {{"threads", threads}, {"cpu_s", cpu},       {"main_thread_cpu_s", main_cpu},
          {"wall_s", wall},     {"system_s", system}, {"minor_page_faults", faults}};
}

// The folder torch_reference.py reads: one raw little-endian file per tensor and manifest.json.
class Exchange {
 public:
  Exchange(fs::path dir, std::string case_name) : dir_(std::move(dir)) {
    fs::create_directories(dir_);
    manifest_ = {{"case", std::move(case_name)}, {"tensors", json::object()}, {"scalars", json::object()}};
  }
  template <class T>
  void tensor(const std::string& name, const T* data, std::vector<std::int64_t> shape) {
    static_assert(std::is_same_v<T, double> || std::is_same_v<T, std::int64_t>);
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;
    const std::string file = name + ".bin";
    write_file(dir_ / file, data, n * sizeof(T));
    manifest_["tensors"][name] = {
        {"dtype", std::is_same_v<T, double> ? "f64" : "i64"}, {"shape", shape}, {"file", file}};
  }
  template <class T>
  void tensor(const std::string& name, const std::vector<T>& v) {
    tensor(name, v.data(), {static_cast<std::int64_t>(v.size())});
  }
  json& scalars() { return manifest_["scalars"]; }
  void finish() const {
    const std::string text = manifest_.dump();
    write_file(dir_ / "manifest.json", text.data(), static_cast<std::int64_t>(text.size()));
  }
  const fs::path& dir() const { return dir_; }

 private:
  static void write_file(const fs::path& path, const void* data, std::int64_t bytes) {
    write_file_atomically(path, std::string_view(static_cast<const char*>(data), static_cast<std::size_t>(bytes)));
  }
  fs::path dir_;
  json manifest_;
};

std::vector<std::int64_t> as_int64(std::span<const std::uint8_t> v) { return {v.begin(), v.end()}; }

// Runs the torch script on the exchange folder; fills the torch columns (or the reason they are missing).
void run_torch(const Settings& s, const Exchange& x, const std::vector<double>& reference_grads, double reference_loss,
               json& report) {
  const fs::path log = x.dir() / "torch.log";
  const std::string command = "'" + s.python + "' '" + s.script + "' --dir '" + x.dir().string() + "' --repeats " +
                              std::to_string(s.repeats) + " > '" + log.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  if (status != 0) {
    std::ifstream in(log);
    std::string reason((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!reason.empty() && reason.back() == '\n') reason.pop_back();
    if (reason.empty()) reason = "'" + command + "' failed";
    // Exit 3 is the script's "torch cannot be imported": a missing baseline. Anything else (a
    // traceback, a signal) is the script failing, which a check must not take for a skip.
    const bool no_torch = WIFEXITED(status) && WEXITSTATUS(status) == 3;
    report[no_torch ? "torch_skipped" : "torch_failed"] = reason;
    return;
  }
  std::ifstream in(x.dir() / "torch.json");
  const json t = json::parse(in);
  report["torch"] = t;
  std::vector<double> grads(reference_grads.size());
  std::ifstream g(x.dir() / "torch_grads.f64", std::ios::binary);
  g.read(reinterpret_cast<char*>(grads.data()), static_cast<std::streamsize>(grads.size() * sizeof(double)));
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    diff = std::max(diff, std::abs(grads[i] - reference_grads[i]));
    scale = std::max(scale, std::abs(reference_grads[i]));
  }
  const double torch_loss = t["loss"];
  report["loss_difference"] = std::abs(torch_loss - reference_loss) / std::max(1.0, std::abs(reference_loss));
  report["grad_difference"] = g ? diff / std::max(scale, 1e-300) : -1.0;
  report["cpu_ratio_torch_over_reference"] = minimum(t["cpu_s"].get<std::vector<double>>()) /
                                             minimum(report["reference_1_thread"]["cpu_s"].get<std::vector<double>>());
}

// The 1-thread and N-thread reference timings, then torch, for one case.
template <class Step, class Read>
json run_case(const Settings& s, Exchange& x, const Step& step, const Read& read) {
  x.finish();
  json report{{"load_average_before", load_average()}};
  std::vector<double> grads_1, grads_n;
  double loss_1 = 0, loss_n = 0;
  report["reference_1_thread"] = time_reference(1, s.repeats, step, read, grads_1, loss_1);
  report["reference_n_threads"] = time_reference(s.threads, s.repeats, step, read, grads_n, loss_n);
  set_reference_threads(1);
  report["bitwise_equal_across_threads"] = grads_1 == grads_n && loss_1 == loss_n;
  report["wall_ratio_n_over_1_thread"] = minimum(report["reference_n_threads"]["wall_s"].get<std::vector<double>>()) /
                                         minimum(report["reference_1_thread"]["wall_s"].get<std::vector<double>>());
  // The main thread runs the serial work and its share of every split (OpenMP's master), so its
  // CPU time is what the N-thread wall time would be on idle cores with evenly split work: an
  // estimate of the wall ratio that a loaded machine does not distort (wall times there measure
  // the scheduler). A lower bound: time the main thread waits for slower workers is not CPU time.
  report["main_thread_cpu_ratio_n_over_1_thread"] =
      minimum(report["reference_n_threads"]["main_thread_cpu_s"].get<std::vector<double>>()) /
      minimum(report["reference_1_thread"]["cpu_s"].get<std::vector<double>>());
  report["loss"] = loss_1;
  run_torch(s, x, grads_1, loss_1, report);
  report["load_average_after"] = load_average();
  return report;
}

json loss_head_case(const Settings& s) {
  MemoryTracker data;
  const std::int64_t rows = s.check ? 96 : 2048, hidden = s.check ? 16 : 256, vocab = s.check ? 200 : 32000;
  const auto p = make_loss_head_problem<double>(data, {.rows = rows, .hidden = hidden, .vocab = vocab, .seed = 7});
  LossHeadOptions o;
  o.policy = LossPolicy::materialize;
  if (s.check) {  // every term of the hybrid loss weighs
    o.temperature = 0.7;
    o.hard_weight = 0.6;
    o.soft_weight = 0.4;
  }
  Exchange x(fs::path(s.work) / "loss_head", "loss_head");
  const std::int64_t T = p.hidden.dim(0), H = p.hidden.dim(1), V = p.lm_head.dim(0);
  x.tensor("hidden", p.hidden.data(), {T, H});
  x.tensor("teacher_hidden", p.teacher_hidden.data(), {T, H});
  x.tensor("lm_head", p.lm_head.data(), {V, H});
  x.tensor("labels", p.labels);
  x.tensor("weights", p.weights);
  x.tensor("valid", as_int64(p.valid));
  x.scalars() = {{"temperature", o.temperature},
                 {"hard_weight", o.hard_weight},
                 {"soft_weight", o.soft_weight},
                 {"weight_sum", p.weight_sum}};
  json r = run_case(
      s, x, [&](MemoryTracker& tracker) { return run_loss_head(tracker, o, p.hidden, p.targets(), p.weight_sum); },
      [](const LossHeadResult<double>& out, std::vector<double>& grads) {
        grads.assign(out.hidden_grad.data(), out.hidden_grad.data() + out.hidden_grad.numel());
        return out.stats.loss;
      });
  r["case"] = "loss head, H " + std::to_string(H) + ", V " + std::to_string(V) + ", T " + std::to_string(T) +
              ", materialize, forward + dL/dY";
  return r;
}

json drafter_case(const Settings& s) {
  const char* config_name = s.check ? "tiny.json" : "mid.json";
  const DrafterConfig config = load_drafter_config(fs::path(DFLASH_SOURCE_DIR) / "configs" / config_name);
  MemoryTracker data;
  const auto params = init_drafter_parameters<double>(data, config, 1, 0.1);
  const auto frozen = init_frozen_weights<double>(data, config, 2);
  const auto batch = make_drafter_batch<double>(
      data, config, {.sequences = 1, .context_length = s.check ? 40 : 512, .seed = 3, .mask_hole_fraction = 0.05});
  DrafterStepOptions options = drafter_step_options(config, 1, 0);
  options.trunk_policy = TrunkPolicy::none;
  options.loss_policy = LossPolicy::materialize;

  // What torch needs beyond the batch: the block rows, embedded; the mask of every layer as a
  // dense [T, S + T] table; the teacher rows; the loss rows.
  const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, batch, options);
  const PreparedSequence<double>& seq = seqs.at(0);
  const std::int64_t S = batch.context_length(), H = config.hidden_size;
  const DrafterDims dims = DrafterDims::of(config, S, static_cast<std::int64_t>(seq.slots.anchors.size()));
  const std::int64_t T = dims.T;
  Exchange x(fs::path(s.work) / "drafter", "drafter");
  std::vector<double> block_input(static_cast<std::size_t>(T * H));
  for (std::int64_t i = 0; i < T; ++i) {
    const double* e = frozen.embed_tokens.row(seq.blocks.input_tokens[i]);
    std::copy(e, e + H, block_input.begin() + i * H);
  }
  x.tensor("block_input", block_input.data(), {T, H});
  x.tensor("block_positions", seq.blocks.positions);
  x.tensor("target_features", batch.target_features.data(), {S, dims.feature_width()});
  MemoryTracker scratch;
  const Tensor<double> teacher = gather_teacher_rows(scratch, batch, 0, seq.blocks);
  x.tensor("teacher_hidden", teacher.data(), {T, H});
  x.tensor("lm_head", frozen.lm_head.data(), {frozen.lm_head.dim(0), H});
  x.tensor("labels", seq.blocks.labels);
  x.tensor("weights", seq.blocks.weights);
  x.tensor("valid", as_int64(seq.blocks.valid));
  for (std::int64_t l = 0; l < dims.L; ++l) {
    const AttentionMask mask{dims.B, seq.slots.anchors, seq.slots.keep,
                             config.layer_types.at(static_cast<std::size_t>(l)), config.sliding_window.value_or(0)};
    std::vector<std::int64_t> visible(static_cast<std::size_t>(T * dims.keys()), 0);
    for (std::int64_t i = 0; i < T; ++i) {
      for_each_visible_key(mask.visible(i), S, [&](std::int64_t j) { visible[i * dims.keys() + j] = 1; });
    }
    x.tensor("visible." + std::to_string(l), visible.data(), {T, dims.keys()});
  }
  json names = json::array();
  params.for_each([&](const std::string& name, const Tensor<double>& t) {
    x.tensor(name, t.data(), t.shape());
    names.push_back(name);
  });
  const LossHeadOptions loss = config.loss_head_options();
  x.scalars() = {{"rms_norm_eps", config.rms_norm_eps},
                 {"rope_theta", config.rope_theta},
                 {"num_attention_heads", dims.nh},
                 {"num_key_value_heads", dims.nkv},
                 {"head_dim", dims.d},
                 {"num_hidden_layers", dims.L},
                 {"temperature", loss.temperature},
                 {"hard_weight", loss.hard_weight},
                 {"soft_weight", loss.soft_weight},
                 {"weight_sum", drafter_weight_sum(config, batch, options)},
                 {"parameters", names}};
  json r = run_case(
      s, x, [&](MemoryTracker& tracker) { return drafter_step(tracker, config, params, frozen, batch, options); },
      [](const DrafterStepResult<double>& out, std::vector<double>& grads) {
        grads.clear();
        out.grads.for_each([&](const std::string&, const Tensor<double>& t) {
          grads.insert(grads.end(), t.data(), t.data() + t.numel());
        });
        grads.insert(grads.end(), out.target_features_grad.data(),
                     out.target_features_grad.data() + out.target_features_grad.numel());
        return out.outputs.stats.loss;
      });
  r["case"] = std::string("drafter step, configs/") + config_name + ", S " + std::to_string(S) + ", T " +
              std::to_string(T) + ", trunk none, loss materialize";
  return r;
}

// --check's verdict over the cases' reports, one line each (the header).
int check_verdict(const json& report) {
  bool all_ran = true, agree = true;
  for (const json& c : report["cases"]) {
    const std::string name = c["case"];
    if (c.contains("torch_skipped")) {
      std::cout << "SKIPPED " << name << ": torch did not run: " << c["torch_skipped"].get<std::string>() << "\n";
      all_ran = false;
      continue;
    }
    if (c.contains("torch_failed")) {
      std::cout << "FAIL " << name << ": torch_reference.py failed: " << c["torch_failed"].get<std::string>() << "\n";
      agree = false;
      continue;
    }
    const double loss = c["loss_difference"], grad = c["grad_difference"];
    const bool threads = c["bitwise_equal_across_threads"];
    const bool ok = loss <= kReferenceTolerance && grad >= 0 && grad <= kReferenceTolerance && threads;
    std::cout << (ok ? "PASS " : "FAIL ") << name << ": torch's loss " << loss << " and gradients " << grad
              << " from the reference's (bound " << kReferenceTolerance << "), 1 and N threads "
              << (threads ? "bitwise equal" : "DIFFER") << "\n";
    agree = agree && ok;
  }
  return !agree ? 1 : (all_ran ? 0 : 77);
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) {
  using namespace dflash;
  Settings s;
  std::string only, json_out;
  CLI::App app("The double reference beside PyTorch float64 on the same inputs (CPU-time ratio, 1 vs N threads)");
  app.add_option("--repeats", s.repeats, "timed runs of each side (the minimum is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", s.threads, "the reference's thread count compared with 1")->check(CLI::PositiveNumber);
  app.add_option("--python", s.python, "the Python that has torch");
  app.add_option("--script", s.script, "torch_reference.py");
  app.add_option("--case", only, "loss_head or drafter (default: both)")
      ->check(CLI::IsMember({"loss_head", "drafter"}));
  app.add_option("--json", json_out, "write the report here");
  app.add_option("--work", s.work, "folder for the exchanged inputs (default: a fresh temporary folder, removed)");
  app.add_flag("--check", s.check,
               "small shapes, one repeat; exit 0 when torch agrees with the reference within 1e-12, 1 when not "
               "or when the script fails, 77 only when torch cannot be imported");
  CLI11_PARSE(app, argc, argv);
  if (s.check) s.repeats = 1;
  const bool own_work = s.work.empty();
  if (own_work) {  // created exclusively (mkdtemp, 0700): nothing planted in it is followed, whoever writes there
    std::error_code error;
    const std::filesystem::path parent = std::filesystem::temp_directory_path(error);
    std::string pattern = (parent / "dflash-vs-torch-XXXXXX").string();
    if (error || mkdtemp(pattern.data()) == nullptr) {
      std::cerr << "bench_reference_vs_torch: cannot create a work folder in " << (error ? "$TMPDIR" : parent.string())
                << ": " << (error ? error.message() : std::strerror(errno)) << " (--work DIR names one)\n";
      return 2;
    }
    s.work = pattern;
  }
  json report{{"isa", std::string(product_isa_name(best_product_isa()))}, {"cases", json::array()}};
  if (only.empty() || only == "loss_head") report["cases"].push_back(loss_head_case(s));
  if (only.empty() || only == "drafter") report["cases"].push_back(drafter_case(s));
  if (own_work) std::filesystem::remove_all(s.work);
  std::cout << report.dump(2) << "\n";
  if (!json_out.empty()) {
    write_file_atomically(json_out, report.dump(2) + "\n");
  }
  return s.check ? check_verdict(report) : 0;
}
