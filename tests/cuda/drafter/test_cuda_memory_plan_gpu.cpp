// The CUDA loss head's device peak, per policy and category, against the memory planner's closed
// form for it (planner/loss_head_memory.hpp, cuda_loss_head_memory) at the production formats:
// bf16 logits and input rows, fp32 statistics, fp32 dL/dY. Every category exactly, transient
// beside the cuBLAS workspace and the small device records the plan does not list (input faults,
// the valid-row count, totals: at most 64 bytes each). The problem's rows are partly invalid
// (make_loss_head_problem): the peaks must not depend on how many.
#include <string>

#include <gtest/gtest.h>

#include "cuda/loss_head/problem.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "planner/loss_head_memory.hpp"

namespace dflash {
namespace {

struct MeasuredPeaks {
  std::size_t loss_saved_after_forward = 0;
  std::size_t loss_saved = 0, transient = 0, gradients = 0, outputs = 0;
  std::size_t left_after_backward = 0;  // loss_saved + transient still held after backward, beyond
                                        // what the head holds for its lifetime (cuBLAS workspace)
};

class CudaLossHeadMemory : public GpuTest {
 protected:
  MeasuredPeaks measure(const LossHeadProblemSpec& spec, LossPolicy policy, std::int64_t chunk) {
    MemoryTracker host;
    const LossHeadProblem<double> p = make_loss_head_problem<double>(host, spec);
    const CudaLossHeadProblem device = upload_loss_head_problem(allocator(), p);
    LossHeadOptions o;
    o.policy = policy;
    o.chunk_rows = chunk;
    allocator().reset_peaks();
    MeasuredPeaks m;
    {
      CudaLossHead head(allocator(), o);
      const std::size_t held_by_head = allocator().tracker().current(MemoryCategory::transient);
      CudaLossHeadForward f = head.forward(device.hidden.data(), device.shape, device.targets(), device.weight_sum);
      m.loss_saved_after_forward = allocator().tracker().current(MemoryCategory::loss_saved);
      const DeviceBuffer<float> g = head.backward(device.targets(), std::move(f.saved));
      m.left_after_backward = allocator().tracker().current(MemoryCategory::loss_saved) +
                              allocator().tracker().current(MemoryCategory::transient) - held_by_head;
    }
    const MemoryTracker& t = allocator().tracker();
    m.loss_saved = t.peak(MemoryCategory::loss_saved);
    m.transient = t.peak(MemoryCategory::transient);
    m.gradients = t.peak(MemoryCategory::gradients);
    m.outputs = t.peak(MemoryCategory::outputs);
    return m;
  }
};

CategoryBytes plan(const LossHeadProblemSpec& spec, LossPolicy policy, std::int64_t chunk) {
  const LossHeadShape s{.rows = spec.rows,
                        .hidden = spec.hidden,
                        .vocab = spec.vocab,
                        .chunk_rows = chunk,
                        .element_bytes = 2,
                        .statistic_bytes = 4,
                        .lm_head_grad = false,
                        .gradient_bytes = 4};
  return cuda_loss_head_memory(s, policy);
}

// The small device records that can be alive at the transient peak besides the plan (input faults:
// 8 counters; the valid-row count; totals: 6 numbers), each at most 64 bytes.
constexpr std::size_t kSmallRecordBytes = 3 * 64;

// Per category: what the plan says exactly, transient beside the workspace and small records.
void expect_as_planned(const LossHeadProblemSpec& spec, const MeasuredPeaks& m, LossPolicy policy, std::int64_t chunk) {
  SCOPED_TRACE(std::string(loss_policy_name(policy)) + " chunk " + std::to_string(chunk));
  const CategoryBytes p = plan(spec, policy, chunk);
  const std::size_t transient = std::size_t(p[PlanCategory::transient]) + CublasGemm::kDefaultWorkspaceBytes;
  EXPECT_EQ(m.loss_saved_after_forward, std::size_t(p[PlanCategory::loss_saved]));
  EXPECT_EQ(m.loss_saved, std::size_t(p[PlanCategory::loss_saved]));
  EXPECT_GE(m.transient, transient);
  EXPECT_LE(m.transient, transient + kSmallRecordBytes);
  EXPECT_EQ(m.gradients, std::size_t(p[PlanCategory::gradients]));
  EXPECT_EQ(m.outputs, std::size_t(p[PlanCategory::outputs]));
  EXPECT_EQ(m.left_after_backward, 0u);  // nothing of forward's or backward's outlives backward
}

const LossHeadProblemSpec kSpec{.rows = 300, .hidden = 64, .vocab = 1000, .seed = 41};

TEST_F(CudaLossHeadMemory, ChunkRecomputeKeepsInputRowsAndStatisticsAsPlanned) {
  for (std::int64_t chunk : {1, 64, 300, 1000}) {
    expect_as_planned(kSpec, measure(kSpec, LossPolicy::chunk_recompute, chunk), LossPolicy::chunk_recompute, chunk);
  }
}

TEST_F(CudaLossHeadMemory, ChunkGradInForwardKeepsOnlyTheFp32HiddenGradientAsPlanned) {
  for (std::int64_t chunk : {1, 64, 300}) {
    expect_as_planned(kSpec, measure(kSpec, LossPolicy::chunk_grad_in_forward, chunk),
                      LossPolicy::chunk_grad_in_forward, chunk);
  }
}

TEST_F(CudaLossHeadMemory, MaterializeKeepsAllLogitsAsPlanned) {
  expect_as_planned(kSpec, measure(kSpec, LossPolicy::materialize, 1), LossPolicy::materialize, 1);
}

// Only the valid rows are computed, but what is held is the same whether none, some or all are.
TEST_F(CudaLossHeadMemory, PeaksDoNotDependOnHowManyRowsAreValid) {
  for (double invalid : {0.0, 1.0}) {
    LossHeadProblemSpec spec = kSpec;
    spec.invalid_fraction = invalid;
    SCOPED_TRACE("invalid fraction " + std::to_string(invalid));
    for (LossPolicy policy :
         {LossPolicy::chunk_grad_in_forward, LossPolicy::chunk_recompute, LossPolicy::materialize}) {
      expect_as_planned(spec, measure(spec, policy, 64), policy, 64);
    }
  }
}

}  // namespace
}  // namespace dflash
