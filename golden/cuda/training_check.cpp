#include "golden/cuda/training_check.hpp"

#include "cuda/runtime/check.hpp"
#include "cuda/runtime/device_probe.hpp"
#include "distributed/cuda/train_step.hpp"
#include "distributed/single_process_communicator.hpp"
#include "golden/training_rule.hpp"

namespace dflash {
namespace {

GoldenOutputs cuda_training_golden_outputs(MemoryTracker& tracker, const TrainingGolden& g) {
  const CudaDeviceStatus& gpu = cuda_device_status();
  if (!gpu.available) throw CudaError("no GPU: " + gpu.reason);
  SingleProcessCommunicator comm;
  const FlatLayout layout(g.config, 1, g.training.zero_stage);
  DeviceAllocator allocator;
  CudaTrainingState state(allocator, {comm, comm}, g.config, g.training, g.frozen,
                          make_optimizer_state(tracker, layout, 0, g.initial));
  std::vector<StepMetrics> metrics;
  for (std::int64_t t = 0; t < g.steps; ++t) {
    const RankSequences all{0, &g.batches[static_cast<std::size_t>(t)]};  // the whole global batch, from g = 0
    metrics.push_back(cuda_train_step(tracker, state, g.config, g.training, {&all, 1}));
  }
  const std::vector<double> master = state.gather_full(CudaTrainingState::Part::master);
  const std::vector<double> exp_avg = state.gather_full(CudaTrainingState::Part::exp_avg);
  const std::vector<double> exp_avg_sq = state.gather_full(CudaTrainingState::Part::exp_avg_sq);
  return {training_golden_results(layout, master, exp_avg, exp_avg_sq, metrics), bf16_training_golden_tolerances(g)};
}

}  // namespace

TrainingGoldenImplementation cuda_training_golden_implementation() {
  return {"cuda",
          "the CUDA training step on one GPU (bf16 step, fp32 master weights, moments and AdamW): final parameters, "
          "moments and per-step metrics, held to SPEC §10's bf16 rule for the step and fp32 rule for the optimizer, "
          "with Adam's drift over the steps (golden/training_rule.hpp)",
          cuda_training_golden_outputs, true};
}

}  // namespace dflash
