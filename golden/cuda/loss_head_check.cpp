#include "golden/cuda/loss_head_check.hpp"

#include "cuda/loss_head/problem.hpp"
#include "cuda/runtime/check.hpp"
#include "cuda/runtime/device_probe.hpp"
#include "golden/bf16_rule.hpp"

namespace dflash {

GoldenImplementation cuda_loss_head_golden_implementation() {
  return {"cuda-loss-head",
          "the CUDA loss head (bf16, fp32 statistics) from the stored Y (output/hidden), held to SPEC §10's bf16 rule",
          [](MemoryTracker& tracker, const Golden& golden) {
            const CudaDeviceStatus& gpu = cuda_device_status();
            if (!gpu.available) throw CudaError("no GPU: " + gpu.reason);
            const GoldenLossHeadProblems problems = golden_loss_head_problems(tracker, golden);
            DeviceAllocator allocator;
            std::vector<LossHeadResult<double>> per_sequence;
            for (const LossHeadProblem<double>& p : problems.device) {
              const CudaLossHeadProblem device = upload_loss_head_problem(allocator, p);
              per_sequence.push_back(run_loss_head_cuda(allocator, tracker, problems.options, device));
            }
            const double weight_sum = problems.device.empty() ? 0.0 : problems.device.front().weight_sum;
            return GoldenOutputs{loss_head_golden_results(per_sequence, weight_sum),
                                 bf16_rule_golden_tolerances(tracker, golden, problems)};
          },
          true};
}

}  // namespace dflash
