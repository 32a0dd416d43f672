// The plan gate of `dflash train`: before anything large is loaded, the run computes and prints
// the `dflash plan` verdict for its config, world size and backend, and refuses with that table
// when the step does not fit (unless --force). A user learns at second 1, not at step 7.
//
// The request: T = block_size x max_anchors block tokens per sequence, S = max_context, b =
// global_batch_sequences / (R U) sequences per rank per micro-step, U micro-steps, R ranks, the
// config's ZeRO stage and policies. Device memory: for `cuda` the 95 GB device of SPEC §1; for
// `cpu` the host's physical memory shared by the ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE).
// Element sizes: production mixed precision for `cuda`, all double (with master copy and moments)
// for `cpu`.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "distributed/training_config.hpp"
#include "io/safetensors_dtype.hpp"
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

struct PlanVerdict {
  MemoryPlan plan;
  std::vector<PolicyVerdict> verdicts;
  bool fits() const { return plan.fit.fits; }
};

std::int64_t host_memory_bytes_per_rank();

PlanRequest training_plan_request(const DrafterConfig& config, const TrainingConfig& training, int world_size,
                                  TrainingBackend backend);
PlanVerdict plan_verdict(const DrafterConfig& config, const TrainingConfig& training, int world_size,
                         TrainingBackend backend);

// Prints the verdict and the table (as `dflash plan` does).
void print_plan_verdict(std::ostream& out, const PlanVerdict& verdict, const std::string& config_path, int world_size,
                        TrainingBackend backend);

}  // namespace dflash
