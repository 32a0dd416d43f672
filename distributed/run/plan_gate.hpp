// The plan gate of `dflash train`: before anything large is loaded, the run computes and prints
// the `dflash plan` verdict for its config, world size and backend, and refuses with that table
// when the step does not fit (unless --force). A user learns at second 1, not at step 7.
//
// The request: T = block_size x max_anchors block tokens per sequence, S = max_context, b =
// global_batch_sequences / (R U) sequences per rank per micro-step, U micro-steps, R ranks, the
// config's ZeRO stage and policies. Device memory: for `cuda` the smallest GPU of the run's ranks
// (cuda_device_bytes, cuda_step_backend.hpp), or the 95 GB device of SPEC §1 where no GPU is
// found; for `cpu` the smallest share of a host's physical memory any rank gets (each node's
// memory divided by its ranks, Communicator::node_ranks: MPI's shared-memory split, under any
// launcher).
// Element sizes: production mixed precision for `cuda`, all double (with master copy and moments)
// for `cpu`. With `cuda` the host is planned too (planner/host_memory.hpp) and the run refused when
// a rank's host would not hold it.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "distributed/training_config.hpp"
#include "io/safetensors_dtype.hpp"
#include "planner/host_memory.hpp"
#include "planner/policy_verdicts.hpp"
#include "planner/training_plan.hpp"

namespace dflash {

enum class TrainingBackend { cpu, cuda };
TrainingBackend parse_training_backend(const std::string& name);  // InputError naming --backend
std::string_view training_backend_name(TrainingBackend backend);
// The precision of the backend's master weights and moments, which its checkpoints store
// (StepBackend::master_dtype): F64 for cpu, F32 for cuda. Known before the backend is made, for the
// disk gate.
safetensors::Dtype master_dtype_of(TrainingBackend backend);

// With backend cuda, also the host's plan (planner/host_memory.hpp): the peak of the rank that
// writes checkpoints, the largest, held against each rank's share of the host's memory (under the
// device rule's headroom, device_fit.hpp), so that every rank gives the same verdict.
struct PlanVerdict {
  MemoryPlan plan;
  std::vector<PolicyVerdict> verdicts;
  std::optional<HostMemoryPlan> host;
  std::optional<DeviceFit> host_fit;
  bool device_fits() const { return plan.fit.fits; }
  bool host_fits() const { return !host_fit || host_fit->fits; }
  bool fits() const { return device_fits() && host_fits(); }
};

// The host's physical memory shared by `ranks_on_node` ranks (>= 1).
std::int64_t host_memory_bytes_per_rank(std::int64_t ranks_on_node);

// A run's ranks on its hosts, as every rank must see them for all to give one verdict: the most
// ranks any node holds, and the smallest share of a host's memory any rank gets (from each rank's
// Communicator::node_ranks, agreed over the ranks by `dflash train`).
struct RankHosts {
  std::int64_t ranks_on_node = 1;
  std::int64_t bytes_per_rank = 0;
};
// One rank alone on this machine (the tests' and benchmarks' one-rank plans).
inline RankHosts single_rank_hosts() { return {1, host_memory_bytes_per_rank(1)}; }

// `gpu_bytes`: the GPU memory of each rank with backend cuda (nullopt: kDefaultDeviceBytes, SPEC
// §1's 95 GB); not read with backend cpu, whose device is the host (hosts.bytes_per_rank).
PlanRequest training_plan_request(const DrafterConfig& config, const TrainingConfig& training, int world_size,
                                  TrainingBackend backend, const RankHosts& hosts,
                                  std::optional<std::int64_t> gpu_bytes = std::nullopt);
PlanVerdict plan_verdict(const DrafterConfig& config, const TrainingConfig& training, int world_size,
                         TrainingBackend backend, const RankHosts& hosts,
                         std::optional<std::int64_t> gpu_bytes = std::nullopt);

// Prints the verdict and the table (as `dflash plan` does).
void print_plan_verdict(std::ostream& out, const PlanVerdict& verdict, const std::string& config_path, int world_size,
                        TrainingBackend backend);

}  // namespace dflash
