// `dflash plan`: the memory plan of a training step per GPU (SPEC §8), or the saved activations of
// a Hugging Face decoder stack (`--decoder`). Every bad flag value is reported with the flag named.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "app/commands.hpp"
#include "distributed/checkpoint/save_restore.hpp"
#include "distributed/run/plan_gate.hpp"
#include "io/errors.hpp"
#include "planner/checked_bytes.hpp"
#include "planner/host_memory.hpp"
#include "planner/memory_size.hpp"
#include "planner/plan_report.hpp"
#include "planner/training_plan.hpp"

namespace dflash::app {
namespace {

struct PlanFlags {
  std::string config, decoder;
  std::optional<std::int64_t> tokens, context, loss_chunk_rows, checkpoint_every, gpus, sequences, micro_steps;
  std::int64_t gpus_per_node = kDefaultGpusPerNode;
  std::optional<std::string> loss_policy, trunk_policy;
  int zero = 1;
  std::string gpu_memory = "95GB";
  bool json = false;
};

std::int64_t positive(const std::optional<std::int64_t>& value, std::int64_t fallback, std::string_view flag) {
  const std::int64_t v = value.value_or(fallback);
  require_at_least(v, 1, flag);
  return v;
}

void run_config_plan(const PlanFlags& f) {
  PlanRequest r = PlanRequest::from_config(load_drafter_config(f.config));
  r.tokens = positive(f.tokens, r.tokens, "--tokens");
  if (r.tokens % r.config.block_size != 0) {
    throw_input_error("--tokens", str(r.tokens, " is not a multiple of block_size = ", r.config.block_size));
  }
  r.context = positive(f.context, r.context, "--context");
  r.loss_chunk_rows = positive(f.loss_chunk_rows, r.loss_chunk_rows, "--loss-chunk-rows");
  r.checkpoint_every = positive(f.checkpoint_every, r.checkpoint_every, "--checkpoint-every");
  r.layout.gpus = positive(f.gpus, r.layout.gpus, "--gpus");
  r.sequences = positive(f.sequences, r.sequences, "--sequences");
  r.micro_steps = positive(f.micro_steps, r.micro_steps, "--micro-steps");
  require_at_least(f.gpus_per_node, 1, "--gpus-per-node");
  if (f.loss_policy) r.loss_policy = parse_loss_policy(*f.loss_policy, "--loss-policy");
  if (f.trunk_policy) r.trunk_policy = parse_trunk_policy(*f.trunk_policy, "--trunk-policy");
  if (f.zero != 0 && f.zero != 1) throw_input_error("--zero", str(f.zero, " is not 0 or 1"));
  r.layout.zero_stage = f.zero;
  r.device_bytes = parse_memory_size(f.gpu_memory, "--gpu-memory");

  const MemoryPlan plan = plan_training_memory(r);
  const std::vector<PolicyVerdict> verdicts = policy_verdicts(r);
  // One checkpoint of `dflash train --backend cuda` on disk (fp32 master weights and moments): the
  // run sets it, times the checkpoints it keeps at once, against --out's free space (disk_gate.hpp).
  const std::uint64_t checkpoint = checkpoint_bytes(r.config, master_dtype_of(TrainingBackend::cuda));
  // What each rank of that run holds on the host (the production plan is the CUDA step's).
  const std::optional<HostMemoryPlan> host = plan_host_memory(r, f.gpus_per_node);
  if (f.json) {
    nlohmann::json j = plan_json(plan, verdicts);
    j["config"] = f.config;
    j["checkpoint_bytes"] = checkpoint;
    if (host) j["host"] = host_memory_json(*host);
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "dflash plan --config " << f.config << "\n";
    print_plan(std::cout, plan, verdicts);
    std::cout << "\none checkpoint of dflash train --backend cuda: " << gb_string(checkpoint)
              << " on disk (fp32 master weights and AdamW m, v); the run checks those it keeps at once "
                 "(--keep, --save-every) against the free space of its --out before it starts\n";
    if (host) print_host_memory(std::cout, *host);
  }
}

void run_decoder_plan(const PlanFlags& f) {
  if (!f.tokens) throw_input_error("--tokens", "missing (required with --decoder)");
  const DecoderPlan plan = plan_decoder(load_decoder_config(f.decoder), positive(f.tokens, 0, "--tokens"),
                                        positive(f.checkpoint_every, 1, "--checkpoint-every"), /*element_bytes=*/2);
  if (f.json) {
    nlohmann::json j = decoder_plan_json(plan);
    j["decoder_config"] = f.decoder;
    std::cout << j.dump(2) << "\n";
  } else {
    print_decoder_plan(std::cout, plan);
  }
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Memory per GPU of a training step (bytes per category, verdict per policy combination), or the saved "
      "activations of a decoder stack (--decoder)");
  auto f = std::make_shared<PlanFlags>();
  auto* config = cmd->add_option("--config", f->config, "Drafter config.json (SPEC §1)");
  auto* decoder = cmd->add_option("--decoder", f->decoder, "Hugging Face decoder config.json (generic layer model)");
  config->excludes(decoder);
  cmd->add_option("--tokens", f->tokens,
                  "Block tokens per GPU (default block_size x max_anchors; required with --decoder)");
  auto* drafter_only = cmd->add_option_group("drafter plan", "Only with --config");
  drafter_only->add_option("--context", f->context, "Context length S (default 4096)");
  drafter_only->add_option("--loss-chunk-rows", f->loss_chunk_rows, "Loss-head chunk rows (default: the config's)");
  drafter_only->add_option(
      "--loss-policy", f->loss_policy,
      "materialize | chunk_retain | chunk_recompute | chunk_grad_in_forward (default: the config's)");
  drafter_only->add_option("--trunk-policy", f->trunk_policy, "none | per_layer | every_k (default: the config's)");
  drafter_only->add_option("--gpus", f->gpus, "Data-parallel GPUs (default 8)");
  drafter_only->add_option("--sequences", f->sequences, "Sequences per GPU per micro-step (default 1)");
  drafter_only->add_option("--micro-steps", f->micro_steps, "Micro-steps U per optimizer step (default 1)");
  drafter_only->add_option("--gpus-per-node", f->gpus_per_node,
                           "GPUs (ranks) per node, for the host plan's node total (default 8)");
  drafter_only->add_option("--zero", f->zero, "ZeRO stage, 0 or 1 (default 1)");
  drafter_only->add_option("--gpu-memory", f->gpu_memory, "Device memory: bytes, or e.g. 95GB, 80GiB (default 95GB)");
  drafter_only->excludes(decoder);
  cmd->add_option("--checkpoint-every", f->checkpoint_every,
                  "k: keep every k-th layer input (every_k; default: the config's, 1 with --decoder)");
  cmd->add_flag("--json", f->json, "Print JSON (integers in bytes) instead of the table");
  cmd->callback([f, &exit_code] {
    if (f->config.empty() == f->decoder.empty()) {
      throw_input_error("plan", "give exactly one of --config FILE or --decoder FILE");
    }
    if (!f->config.empty()) {
      run_config_plan(*f);
    } else {
      run_decoder_plan(*f);
    }
    exit_code = 0;
  });
}

}  // namespace dflash::app
