#include "golden/cuda/step_check.hpp"

#include <algorithm>

#include "cuda/drafter/step.hpp"
#include "cuda/runtime/check.hpp"
#include "cuda/runtime/device_probe.hpp"
#include "golden/compare_rules.hpp"

namespace dflash {
namespace {

GoldenOutputs cuda_step_golden_outputs(MemoryTracker& tracker, const Golden& golden) {
  const CudaDeviceStatus& gpu = cuda_device_status();
  if (!gpu.available) throw CudaError("no GPU: " + gpu.reason);
  DrafterStepOptions options = golden.step_options();
  // chunk_retain keeps every chunk's logits (the memory trap, refused on CUDA); chunk_recompute
  // computes the same quantities.
  if (options.loss_policy == LossPolicy::chunk_retain) options.loss_policy = LossPolicy::chunk_recompute;
  DeviceAllocator allocator;
  const CudaDrafterStepResult r =
      cuda_drafter_step(allocator, tracker, golden.config, golden.params, golden.frozen, golden.batch, options);

  GoldenOutputs out;
  auto scalar = [&](const char* name, double value) { out.tensors[name] = GoldenTensor{{}, {value}}; };
  scalar("output/loss", r.stats.loss);
  scalar("output/ce", r.stats.ce);
  scalar("output/kl", r.stats.kl);
  scalar("output/accuracy", r.stats.accuracy());
  scalar("output/weight_sum", r.weight_sum);
  r.grads.for_each([&](const std::string& name, const Tensor<double>& g) {
    out.tensors["grad/" + name] = GoldenTensor{g.shape(), g.values()};
  });

  const std::map<std::string, double, std::less<>> bounds = golden_result_bounds(golden, CompareRule::bf16);
  const std::int64_t T = golden.results.at("output/hidden").shape.at(1);
  const double step =
      step_result_bound(CompareRule::bf16, golden.config, golden.num_sequences(), golden.context_length(), T);
  for (const auto& [name, t] : out.tensors) {
    const auto bound = bounds.find(name);
    if (bound == bounds.end()) continue;  // no tolerance: the check fails the tensor, saying so
    out.tolerance[name] = is_loss_head_result(name) ? std::max(bound->second, step) : bound->second;
  }
  return out;
}

}  // namespace

GoldenImplementation cuda_drafter_step_golden_implementation() {
  return {"cuda",
          "the whole CUDA step (trunk, loss head, backward; bf16 operands, fp32 accumulation) from the stored inputs: "
          "losses, accuracy, W and every gradient, held to SPEC §10's bf16 rule",
          cuda_step_golden_outputs, true};
}

}  // namespace dflash
