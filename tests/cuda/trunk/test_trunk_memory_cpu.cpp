// The CUDA trunk's memory plan (planner/cuda_trunk_memory.hpp) against what the
// trunk's code (cuda/trunk/stack.hpp over cuda/trunk/layer.hpp) allocates when it
// runs on the CPU backend (harness/cuda/host_backend.hpp) with a MemoryTracker
// counting every buffer by category, as the device allocator does: for bf16
// storage (the GPU's formats, 2 B) and fp32 storage (4 B), on the tiny and mid
// configs, under every trunk policy (every_k 3 on mid's 4 layers leaves a
// 1-layer segment), the peak of `saved` and of `transient` equal the plan to
// the byte.
#include <gtest/gtest.h>

#include <string>

#include "cuda/runtime/bf16_bits.hpp"
#include "harness/cuda/host_backend.hpp"
#include "planner/cuda_trunk_memory.hpp"
#include "tests/cuda/trunk/twin_support.hpp"

namespace dflash {
namespace {

struct PolicyCase {
  TrunkPolicy policy;
  std::int64_t every;
};
const PolicyCase kPolicies[] = {
    {TrunkPolicy::none, 1}, {TrunkPolicy::per_layer, 1}, {TrunkPolicy::every_k, 2}, {TrunkPolicy::every_k, 3}};

template <class Storage>
void expect_peaks_as_planned(const TrunkProblem& p) {
  for (const PolicyCase& c : kPolicies) {
    SCOPED_TRACE(std::string(trunk_policy_name(c.policy)) + " k " + std::to_string(c.every) + ", storage " +
                 std::to_string(sizeof(Storage)) + " B");
    MemoryTracker tracker;
    run_trunk(HostBackend<Storage>{tracker}, p, c.policy, c.every);
    const CudaTrunkMemory plan = cuda_trunk_memory(p.dims, c.policy, c.every, sizeof(Storage));
    EXPECT_EQ(tracker.peak(MemoryCategory::saved), std::size_t(plan.saved_bytes));
    EXPECT_EQ(tracker.peak(MemoryCategory::transient), std::size_t(plan.transient_bytes));
    EXPECT_EQ(tracker.current(MemoryCategory::saved), 0u) << "backward frees what forward kept";
    EXPECT_EQ(tracker.current(MemoryCategory::transient), 0u);
  }
}

class TrunkMemoryPlan : public ::testing::TestWithParam<TrunkCase> {};
// With the configs' MLPs the MLP backward binds the transient peak; with mid's cut to I = 16 the
// projection gradients do under none and per_layer, and the forward of a segment's inner layer
// under every_k.
INSTANTIATE_TEST_SUITE_P(Configs, TrunkMemoryPlan,
                         ::testing::Values(TrunkCase{"tiny.json", 11, 4}, TrunkCase{"mid.json", 40, 2},
                                           TrunkCase{"mid.json", 40, 2, 16}),
                         [](const auto& info) {
                           const std::string I =
                               info.param.intermediate_size ? std::to_string(info.param.intermediate_size) : "";
                           return std::string(info.param.config).substr(0, 3) + I;
                         });

TEST_P(TrunkMemoryPlan, Bf16StoragePeaksEqualThePlan) { expect_peaks_as_planned<Bf16Bits>(TrunkProblem(GetParam())); }

TEST_P(TrunkMemoryPlan, Fp32StoragePeaksEqualThePlan) { expect_peaks_as_planned<float>(TrunkProblem(GetParam())); }

}  // namespace
}  // namespace dflash
