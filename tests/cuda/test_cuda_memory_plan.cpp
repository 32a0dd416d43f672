// The CUDA loss head's device peak, per policy and category, against the memory planner
// (planner/loss_head_memory.hpp) evaluated for the production formats: bf16 logits and input
// rows, fp32 statistics, and dL/dY in fp32 (so its categories come from the planner at 4-byte
// elements). What the planner does not model is device-only and stated here, bytes exact:
// the cuBLAS workspace, the forward's per-row scratch (ce, kl fp32 and a correct flag: 9 T) and
// the input-check and totals records.
#include <string>

#include <gtest/gtest.h>

#include "cuda/loss_head_cuda_problem.hpp"
#include "planner/loss_head_memory.hpp"
#include "tests/cuda/gpu_test_support.hpp"

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

struct PlannedPeaks {
  CategoryBytes bf16;   // logits, log-probs, input rows at 2 bytes
  CategoryBytes fp32;   // the same shape at 4 bytes: the categories holding dL/dY
};

PlannedPeaks plan(const LossHeadProblemSpec& spec, LossPolicy policy, std::int64_t chunk) {
  LossHeadShape s{spec.rows, spec.hidden, spec.vocab, chunk, 2, 4, false};
  PlannedPeaks p;
  p.bf16 = loss_head_memory(s, policy);
  s.element_bytes = 4;
  p.fp32 = loss_head_memory(s, policy);
  return p;
}

// Device-only transient bytes besides the planner's: workspace, 9 T of per-row scratch, and the
// two small records (input faults: 8 counters; totals: 6 numbers), each at most 64 bytes.
std::size_t device_only_transient(const LossHeadProblemSpec& spec) {
  return CublasGemm::kDefaultWorkspaceBytes + 9 * static_cast<std::size_t>(spec.rows) + 2 * 64;
}

// Per category: what the plan says exactly (loss_saved, gradients, outputs; dL/dY's categories
// at 4-byte elements), and transient between the plan and the plan plus the device-only bytes.
void expect_as_planned(const LossHeadProblemSpec& spec, const MeasuredPeaks& m, LossPolicy policy, std::int64_t chunk) {
  SCOPED_TRACE(std::string(loss_policy_name(policy)) + " chunk " + std::to_string(chunk));
  const PlannedPeaks p = plan(spec, policy, chunk);
  const CategoryBytes& saved_plan = policy == LossPolicy::chunk_grad_in_forward ? p.fp32 : p.bf16;
  EXPECT_EQ(m.loss_saved_after_forward, std::size_t(saved_plan[PlanCategory::loss_saved]));
  EXPECT_EQ(m.loss_saved, std::size_t(saved_plan[PlanCategory::loss_saved]));
  EXPECT_GE(m.transient, std::size_t(p.bf16[PlanCategory::transient]));
  EXPECT_LE(m.transient, std::size_t(p.bf16[PlanCategory::transient]) + device_only_transient(spec));
  EXPECT_EQ(m.gradients, std::size_t(p.fp32[PlanCategory::gradients]));
  EXPECT_EQ(m.outputs, std::size_t(p.bf16[PlanCategory::outputs]));
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

}  // namespace
}  // namespace dflash
