// A plan as `dflash plan` shows it: JSON (integers in bytes) and a table for people (GiB and a
// verdict). The JSON keys are the contract scripts read (planner/README.md lists them).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/decoder_layer_activations.hpp"
#include "planner/device_fit.hpp"
#include "planner/host_memory.hpp"
#include "planner/policy_verdicts.hpp"
#include "planner/training_plan.hpp"

namespace dflash {

// "FITS, 46.00 GiB to spare" or "DOES NOT FIT, 0.92 GiB over": a device's verdict, or a host's.
std::string verdict_text(const DeviceFit& fit);

nlohmann::json plan_json(const MemoryPlan& plan, const std::vector<PolicyVerdict>& verdicts);
void print_plan(std::ostream& out, const MemoryPlan& plan, const std::vector<PolicyVerdict>& verdicts);

// The host plan of a CUDA rank (host_memory.hpp): every term and phase in bytes, and the peaks of
// a rank, of the rank that writes checkpoints and of a node.
nlohmann::json host_memory_json(const HostMemoryPlan& host);
void print_host_memory(std::ostream& out, const HostMemoryPlan& host);

// The generic decoder stack (`dflash plan --decoder`).
struct DecoderPlan {
  DecoderConfig config;
  std::int64_t tokens = 0;
  std::int64_t element_bytes = 2;
  std::vector<PerTokenTensor> layer_tensors;
  ActivationMemory activations;
};

DecoderPlan plan_decoder(const DecoderConfig& config, std::int64_t tokens, std::int64_t checkpoint_every,
                         std::int64_t element_bytes);
nlohmann::json decoder_plan_json(const DecoderPlan& plan);
void print_decoder_plan(std::ostream& out, const DecoderPlan& plan);

}  // namespace dflash
