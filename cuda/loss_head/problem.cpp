#include "cuda/loss_head/problem.hpp"

#include <vector>

#include "cuda/runtime/bf16_bits.hpp"

namespace dflash {
namespace {

DeviceBuffer<Bf16Bits> upload_bf16(DeviceAllocator& allocator, MemoryCategory category, const Tensor<double>& x) {
  return DeviceMemory{allocator}.from_host(category, bf16_bits_of(x.data(), x.numel()));
}

template <class T>
DeviceBuffer<T> upload_values(DeviceAllocator& allocator, MemoryCategory category, const std::vector<T>& values) {
  return DeviceMemory{allocator}.from_host(category, values);
}

Tensor<double> widen(MemoryTracker& tracker, MemoryCategory category, Shape shape, const std::vector<float>& values) {
  Tensor<double> t(tracker, category, std::move(shape));
  for (std::size_t e = 0; e < values.size(); ++e) t[static_cast<std::int64_t>(e)] = values[e];
  return t;
}

}  // namespace

CudaLossHeadProblem upload_loss_head_problem(DeviceAllocator& allocator, const LossHeadProblem<double>& p) {
  std::vector<float> weights;
  for (double w : p.weights) weights.push_back(static_cast<float>(w));
  return CudaLossHeadProblem{{p.hidden.dim(0), p.hidden.dim(1), p.lm_head.dim(0)},
                             upload_bf16(allocator, MemoryCategory::inputs, p.hidden),
                             upload_bf16(allocator, MemoryCategory::inputs, p.teacher_hidden),
                             upload_bf16(allocator, MemoryCategory::frozen, p.lm_head),
                             upload_values(allocator, MemoryCategory::inputs, p.labels),
                             upload_values(allocator, MemoryCategory::inputs, weights),
                             upload_values(allocator, MemoryCategory::inputs, p.valid),
                             p.weight_sum};
}

LossHeadResult<double> run_loss_head_cuda(DeviceAllocator& allocator, MemoryTracker& host,
                                          const LossHeadOptions& options, const CudaLossHeadProblem& problem) {
  CudaLossHead head(allocator, options);
  const CudaLossHeadTargets targets = problem.targets();
  CudaLossHeadForward f = head.forward(problem.hidden.data(), problem.shape, targets, problem.weight_sum);
  const DeviceBuffer<float> hidden_grad = head.backward(targets, std::move(f.saved));
  const std::int64_t T = problem.shape.rows, H = problem.shape.hidden;
  return LossHeadResult<double>{f.stats, widen(host, MemoryCategory::outputs, {T}, f.lse.download()),
                                widen(host, MemoryCategory::outputs, {T}, f.token_loss.download()),
                                widen(host, MemoryCategory::gradients, {T, H}, hidden_grad.download()), std::nullopt};
}

}  // namespace dflash
