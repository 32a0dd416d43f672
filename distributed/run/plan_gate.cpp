#include "distributed/run/plan_gate.hpp"

#include <unistd.h>

#include <cstdlib>

#include "distributed/global_batch.hpp"
#include "io/errors.hpp"
#include "planner/memory_size.hpp"
#include "planner/plan_report.hpp"

namespace dflash {

TrainingBackend parse_training_backend(const std::string& name) {
  if (name == "cpu") return TrainingBackend::cpu;
  if (name == "cuda") return TrainingBackend::cuda;
  throw_input_error("--backend", str("'", name, "' is not cpu or cuda"));
}

std::string_view training_backend_name(TrainingBackend backend) {
  return backend == TrainingBackend::cpu ? "cpu" : "cuda";
}

safetensors::Dtype master_dtype_of(TrainingBackend backend) {
  return backend == TrainingBackend::cuda ? safetensors::Dtype::F32 : safetensors::Dtype::F64;
}

std::int64_t host_memory_bytes_per_rank(std::int64_t ranks_on_node) {
  if (ranks_on_node < 1) throw_input_error("ranks on a node", str(ranks_on_node, " must be >= 1"));
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return std::int64_t(pages) * std::int64_t(page) / ranks_on_node;
}

PlanRequest training_plan_request(const DrafterConfig& config, const TrainingConfig& training, int world_size,
                                  TrainingBackend backend, const RankHosts& hosts,
                                  std::optional<std::int64_t> gpu_bytes) {
  const GlobalBatchLayout layout =
      GlobalBatchLayout::of(training, world_size);  // refuses a global batch R U does not divide
  PlanRequest r = PlanRequest::from_config(config);
  r.context = training.max_context;
  r.sequences = layout.per_rank_micro_step();
  r.micro_steps = training.micro_steps;
  r.layout.gpus = world_size;
  r.layout.zero_stage = training.zero_stage;
  if (backend == TrainingBackend::cpu) {
    r.precision = TrainingPrecision::reference_training();
    r.features_grad = true;  // drafter_step_accumulate makes (and frees) each sequence's dL/dF
    r.device_bytes = hosts.bytes_per_rank;
  } else {
    r.precision = TrainingPrecision::production();
    r.layout.in_place_flat = true;  // distributed/cuda/training_state.hpp
    r.device_bytes = gpu_bytes.value_or(kDefaultDeviceBytes);
  }
  return r;
}

PlanVerdict plan_verdict(const DrafterConfig& config, const TrainingConfig& training, int world_size,
                         TrainingBackend backend, const RankHosts& hosts, std::optional<std::int64_t> gpu_bytes) {
  const PlanRequest r = training_plan_request(config, training, world_size, backend, hosts, gpu_bytes);
  PlanVerdict v{plan_training_memory(r), policy_verdicts(r), std::nullopt, std::nullopt};
  if (backend == TrainingBackend::cuda) {
    v.host = plan_host_memory(r, hosts.ranks_on_node);
    v.host_fit = device_fit(v.host->lead_peak(), hosts.bytes_per_rank);
  }
  return v;
}

void print_plan_verdict(std::ostream& out, const PlanVerdict& v, const std::string& config_path, int world_size,
                        TrainingBackend backend) {
  out << "dflash train: plan for " << config_path << " on " << world_size << " rank(s), backend "
      << training_backend_name(backend) << ": " << (v.fits() ? "fits" : "DOES NOT FIT") << "\n";
  print_plan(out, v.plan, v.verdicts);
  if (!v.host) return;
  print_host_memory(out, *v.host);
  const DeviceFit& f = *v.host_fit;
  out << "host share per rank " << gib_string(f.device_bytes) << " GiB, headroom " << gib_string(f.headroom_bytes)
      << " GiB, usable " << gib_string(f.usable_bytes) << " GiB: the writing rank's peak " << verdict_text(f) << "\n";
}

}  // namespace dflash
