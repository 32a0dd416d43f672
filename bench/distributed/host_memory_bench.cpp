// The host memory a rank of `dflash train --backend cuda` holds while it trains: what the process
// keeps resident beyond what its backend holds. The run is the CUDA step's own code on the CPU's
// training backend (harness/cuda/host_training_backend.hpp), whose "device" memory is host memory
// counted by a MemoryTracker, so that
//   held by the host = resident set (VmRSS) - the backend's bytes (its tracker's current total)
// after each step. A GPU rank's host would hold the same, with the backend's bytes on the GPU.
// Also reported: the peak resident set (VmHWM) from the start to the first step's end, between steps
// and from the last checkpoint's first gather (with the resident set there), the storage pool's live
// and cached bytes, the pages mapped from files, the sizes of the frozen weights and the parameters
// in double (2 V H values; P), and the host plan (planner/host_memory.hpp), to read the peaks by.
//
//   build/app/dflash data synth --config bench/distributed/host_memory.json --out /tmp/hm/set --sequences 4 --shards 1
//   build/bench/distributed/bench_host_memory --config bench/distributed/host_memory.json --set /tmp/hm/set
//       --out /tmp/hm/run [--stop-after T] [--resume] [--json FILE]      (one command line each)
// The config trains 3 steps: --stop-after 0, then --resume, measures a resumed rank too.
// bench/distributed/host_memory_steps.json measures the steps: 8 sequences of 4096 rows a step, K = 8
// (its set: `data synth ... --sequences 8 --shards 1 --min-length 4096 --max-length 4096`).
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "distributed/run/device_step_backend.hpp"
#include "distributed/run/plan_gate.hpp"
#include "distributed/run/trainer.hpp"
#include "distributed/single_process_communicator.hpp"
#include "harness/cuda/host_training_backend.hpp"
#include "io/file_write.hpp"
#include "planner/plan_report.hpp"
#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"
#include "reference/storage_pool.hpp"

namespace dflash {
namespace {

// A field of /proc/self/status in bytes ("VmRSS:   123 kB").
std::int64_t proc_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// Restarts VmHWM from the current resident set (Linux: "5" into clear_refs), so that each reading
// of it is the peak since the last one.
void restart_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5\n";
}

double gb(std::int64_t bytes) { return double(bytes) / 1e9; }

// The backend with a reading where a save starts to gather (its master weights): the resident set
// then (after what the run let go of before its save) and the peak restarted from it, so that the
// last peak the benchmark reads is the save's own.
class SaveProbe final : public DeviceStepBackend<HostTrainingBackend> {
 public:
  SaveProbe(std::int64_t& resident_at_gather, HostTrainingBackend backend, CudaCommunicators comms,
            const DrafterConfig& config, const TrainingConfig& training, const FrozenWeightSource& frozen,
            const OptimizerState& state)
      : DeviceStepBackend(backend, comms, config, training, frozen, state), resident_at_gather_(resident_at_gather) {}
  FlatValues gather_optimizer(OptimizerPart part, bool to_this_rank) override {
    if (part == OptimizerPart::master) {
      resident_at_gather_ = proc_status_bytes("VmRSS");
      restart_peak();
    }
    return DeviceStepBackend::gather_optimizer(part, to_this_rank);
  }

 private:
  std::int64_t& resident_at_gather_;
};

int run(int argc, char** argv) {
  CLI::App app{"Host memory of a CUDA training rank (bench/distributed/host_memory_bench.cpp)"};
  std::string config_path, set, out, json_path;
  bool resume = false;
  std::int64_t stop_after = -1;
  app.add_option("--config", config_path, "drafter and training config")->required();
  app.add_option("--set", set, "dflash data synth's directory (target/ and features/)")->required();
  app.add_option("--out", out, "the run's directory")->required();
  app.add_flag("--resume", resume, "resume the run in --out");
  app.add_option("--stop-after", stop_after, "stop (as on SIGTERM: save, exit 0) after this step");
  app.add_option("--json", json_path, "write the numbers here");
  CLI11_PARSE(app, argc, argv);

  const DrafterConfig config = load_drafter_config(config_path);
  MemoryTracker device;
  TrainingRunOptions o;
  o.config = config_path;
  o.data = std::filesystem::path(set) / "features";
  o.target = std::filesystem::path(set) / "target";
  o.out = out;
  o.resume = resume;
  o.backend = TrainingBackend::cuda;
  std::int64_t resident_at_gather = -1;
  o.make_step_backend = [&](Communicator& comm, const DrafterConfig& c, const TrainingConfig& training,
                            const FrozenWeightSource& frozen, TrainingState state) {
    return std::make_unique<SaveProbe>(resident_at_gather, HostTrainingBackend{device}, CudaCommunicators{comm, comm},
                                       c, training, frozen, state.optimizer);
  };
  nlohmann::json steps = nlohmann::json::array();
  o.after_step = [&](std::int64_t t) {
    const std::int64_t rss = proc_status_bytes("VmRSS"), backend = std::int64_t(device.current_total());
    const std::int64_t peak = proc_status_bytes("VmHWM");  // since the last reading
    // Of the resident set, the pages that belong to files (the program, its libraries, the shards
    // and the target it maps: the kernel may drop them and read them again) and the rest.
    const std::int64_t file = proc_status_bytes("RssFile") + proc_status_bytes("RssShmem");
    restart_peak();
    const StoragePoolState pool = storage_pool_state();
    steps.push_back({{"step", t},
                     {"rss_bytes", rss},
                     {"backend_bytes", backend},
                     {"host_bytes", rss - backend},
                     {"file_backed_bytes", file},
                     {"peak_rss_bytes_since_last", peak},
                     {"pool_live_bytes", pool.live_bytes},
                     {"pool_cached_bytes", pool.cached_bytes}});
    std::printf(
        "after step %lld: resident %.3f GB, backend %.3f GB, held by the host %.3f GB (pool: live %.3f, "
        "cached %.3f GB; mapped from files %.3f GB); peak resident since the last reading %.3f GB\n",
        static_cast<long long>(t), gb(rss), gb(backend), gb(rss - backend), gb(std::int64_t(pool.live_bytes)),
        gb(std::int64_t(pool.cached_bytes)), gb(file), gb(peak));
    if (t == stop_after) std::raise(SIGTERM);
  };
  SingleProcessCommunicator comm;
  const int code = run_training(o, comm, std::cout);
  const std::int64_t peak = proc_status_bytes("VmHWM");  // the last checkpoint's write, from its first gather
  const std::int64_t frozen = 2 * config.vocab_size * config.hidden_size * std::int64_t(sizeof(double));
  const std::int64_t P = drafter_parameter_count(config);
  std::printf(
      "resident where the last checkpoint starts to gather %.3f GB, peak resident from there %.3f GB; in double, the frozen weights (2 V H) are %.3f GB and the "
      "P = %lld parameters %.3f GB\n",
      gb(resident_at_gather), gb(peak), gb(frozen), static_cast<long long>(P), gb(P * std::int64_t(sizeof(double))));
  // The host plan of this run (planner/host_memory.hpp), to read the peaks by: each peak above is the
  // process's base (the host's bytes after a step, less the staging it keeps) plus the backend's bytes
  // at that moment plus the plan's phase.
  const HostMemoryPlan plan = *plan_host_memory(
      training_plan_request(config, load_training_config(config_path), 1, TrainingBackend::cuda, single_rank_hosts()),
      1);
  std::printf(
      "host plan: fresh start %.3f GB, resumed start %.3f GB, steps %.3f GB (staging %.3f GB), checkpoint write "
      "%.3f GB\n",
      gb(plan.fresh_start()), gb(plan.resumed_start()), gb(plan.steps()), gb(plan.upload_staging),
      gb(plan.checkpoint_write()));
  if (!json_path.empty()) {
    const nlohmann::json j = {{"config", config_path},
                              {"resume", resume},
                              {"rss_bytes_at_last_gather", resident_at_gather},
                              {"peak_rss_bytes_after_last_step", peak},
                              {"frozen_double_bytes", frozen},
                              {"parameters", P},
                              {"steps", steps},
                              {"host_plan", host_memory_json(plan)}};
    write_file_atomically(json_path, j.dump(1) + "\n");
  }
  return code;
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) {
  try {
    return dflash::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_host_memory: %s\n", e.what());
    return 1;
  }
}
