// The trunk and the whole drafter step on the GPU, on the tiny and mid configs with dropout at
// every site: the trunk (cuda/trunk/stack.hpp on CudaBackend) within SPEC §10's bf16 rule of the double
// reference, the plain bf16 computation being the same trunk on the CPU backend with bf16 storage;
// the step (cuda/drafter/step.hpp) under every trunk policy x chunked loss policy bitwise the
// same, two runs bitwise equal, its device peaks per category as `dflash plan` plans them, and
// bad input refused with the reference's message before anything is put on the device. Skipped,
// with the reason, without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "common/tolerances.hpp"
#include "cuda/drafter/gemms.hpp"
#include "cuda/drafter/step.hpp"
#include "cuda/gemm/cublas.hpp"
#include "cuda/gemm/linear.hpp"
#include "cuda/trunk/device_backend.hpp"
#include "harness/cuda/config_path.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "harness/cuda/host_backend.hpp"
#include "planner/training_plan.hpp"
#include "reference/compare.hpp"
#include "reference/drafter_problem.hpp"
#include "tests/cuda/drafter/step_plan_support.hpp"
#include "tests/cuda/trunk/twin_support.hpp"

namespace dflash {
namespace {

using ::testing::HasSubstr;

struct StepProblem {
  MemoryTracker tracker;
  DrafterConfig config;
  DrafterParameters<double> params;
  FrozenWeights<double> frozen;
  DrafterBatch<double> batch;

  StepProblem(const char* name, std::int64_t context_length) : config(load_drafter_config(test_config_file(name))) {
    config.attention_dropout = 0.1;
    config.hidden_dropout = 0.1;
    params = init_drafter_parameters<double>(tracker, config, 11, 0.2);
    frozen = init_frozen_weights<double>(tracker, config, 12);
    batch = make_drafter_batch<double>(tracker, config, {.sequences = 2, .context_length = context_length, .seed = 5});
  }
};

// The statistics and every gradient, flattened (loss, ce, kl, correct, valid rows first).
std::vector<double> flatten(const CudaDrafterStepResult& r) {
  std::vector<double> all = {r.stats.loss, r.stats.ce, r.stats.kl, double(r.stats.correct), double(r.stats.valid_rows)};
  r.grads.for_each([&](const std::string&, const Tensor<double>& t) {
    all.insert(all.end(), t.values().begin(), t.values().end());
  });
  all.insert(all.end(), r.target_features_grad.values().begin(), r.target_features_grad.values().end());
  return all;
}

class DrafterStepGpu : public GpuTest {};

// The GPU and the plain computation differ in cuBLAS's summation order and the device's expf;
// what both round to bf16 dominates their error, and the fp32 floor covers the rest.
TEST_F(DrafterStepGpu, TrunkWithinBf16RuleOfDoubleReference) {
  for (const TrunkCase& c : {TrunkCase{"tiny.json", 11, 4}, TrunkCase{"mid.json", 300, 4}}) {
    SCOPED_TRACE(c.config);
    TrunkProblem p(c);
    p.round_to_device_formats();
    const TrunkValues<double> exact = reference_trunk<double>(p);
    MemoryTracker host;
    // The plain computation of what the device runs: where the step takes the tensor-core attention
    // backward, f P and dS are bf16 product operands (HostBackend::round_attention_product_operands).
    HostBackend<Bf16Bits> plain_backend{host};
    plain_backend.round_attention_product_operands =
        kDrafterStepAttentionBackward == AttentionBackwardKernel::tensor_cores_where_supported;
    const TrunkValues<float> plain = run_trunk(plain_backend, p, TrunkPolicy::per_layer, 1);
    LinearGemm gemm(allocator());
    const TrunkValues<float> got = run_trunk(CudaBackend{allocator(), gemm}, p, TrunkPolicy::per_layer, 1);
    expect_trunk_within_rule(p, got, plain, exact, kAttentionFp32Floor);
  }
}

TEST_F(DrafterStepGpu, EveryPolicyBitwiseEqualAndRepeatable) {
  for (const auto& [name, S] : {std::pair{"tiny.json", std::int64_t(11)}, std::pair{"mid.json", std::int64_t(200)}}) {
    SCOPED_TRACE(name);
    StepProblem p(name, S);
    std::vector<double> first;
    for (const TrunkPolicy trunk : kAllTrunkPolicies) {
      for (const LossPolicy loss : {LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward}) {
        SCOPED_TRACE(std::string(trunk_policy_name(trunk)) + " x " + std::string(loss_policy_name(loss)));
        DrafterStepOptions o = drafter_step_options(p.config);
        o.trunk_policy = trunk;
        o.checkpoint_every = 2;
        o.loss_policy = loss;
        const std::vector<double> got =
            flatten(cuda_drafter_step(allocator(), p.tracker, p.config, p.params, p.frozen, p.batch, o));
        for (double v : got) ASSERT_TRUE(std::isfinite(v));
        if (first.empty()) {
          first = got;
          ASSERT_GT(first[4], 0) << "no labelled row: the problem tests nothing";
          continue;
        }
        ASSERT_EQ(got.size(), first.size());
        for (std::size_t e = 0; e < got.size(); ++e) ASSERT_TRUE(same_bits(got[e], first[e])) << "value " << e;
      }
    }
  }
}

// The step's device peaks per category against `dflash plan` for the same shapes (production
// precision, one GPU, ZeRO-0: the step holds no optimizer state): exact in every category but
// transient, which lies between the plan and the plan plus what only the device allocates: the
// two cuBLAS workspaces (trunk and loss head) and the loss head's small records (at most 3 x 64 B;
// tests/cuda/drafter/test_cuda_memory_plan_gpu.cpp). The loss head's row list and scratch are in the plan
// (cuda_loss_head_memory).
TEST_F(DrafterStepGpu, PeaksPerCategoryAsPlanned) {
  StepProblem p("mid.json", 200);
  for (const TrunkPolicy trunk : kAllTrunkPolicies) {
    SCOPED_TRACE(trunk_policy_name(trunk));
    DrafterStepOptions o = drafter_step_options(p.config);
    o.trunk_policy = trunk;
    o.checkpoint_every = 2;
    o.loss_policy = LossPolicy::chunk_recompute;
    allocator().reset_peaks();
    cuda_drafter_step(allocator(), p.tracker, p.config, p.params, p.frozen, p.batch, o);
    const std::int64_t device_only = std::int64_t(CudaDrafterGemms::workspace_bytes()) + 3 * 64;
    expect_peaks_as_planned(allocator().tracker(), step_plan(p.config, p.batch, o), device_only);
    EXPECT_EQ(allocator().tracker().current_total(), 0u) << "the step frees what it allocated";
  }
}

// The device is not touched: the allocator has counted nothing when the error is thrown.
std::string step_error(DeviceAllocator& a, StepProblem& p) {
  try {
    cuda_drafter_step(a, p.tracker, p.config, p.params, p.frozen, p.batch, drafter_step_options(p.config));
  } catch (const InputError& e) {
    EXPECT_EQ(a.tracker().peak_total(), 0u) << "device memory was taken before the input was checked";
    return e.what();
  }
  return "(accepted)";
}

TEST_F(DrafterStepGpu, TokenIdAtLeastVocabRefused) {
  StepProblem p("tiny.json", 11);
  p.batch.tokens[1 * 11 + 4] = p.config.vocab_size;
  EXPECT_THAT(step_error(allocator(), p), HasSubstr("invalid tokens[1][4]: 64 is outside [0, vocab_size = 64)"));
}

TEST_F(DrafterStepGpu, NonFiniteTargetFeatureRefused) {
  StepProblem p("tiny.json", 11);
  p.batch.target_features[7] = std::nan("");
  EXPECT_THAT(step_error(allocator(), p), HasSubstr("is nan; every value must be finite"));
}

TEST_F(DrafterStepGpu, AnchorOutOfRangeRefused) {
  StepProblem p("tiny.json", 11);
  p.batch = make_drafter_batch<double>(p.tracker, p.config,
                                       {.sequences = 2, .context_length = 11, .seed = 5, .explicit_anchors = true});
  p.batch.anchors->row(0)[3] = 11;  // = S
  EXPECT_THAT(step_error(allocator(), p), HasSubstr("11 is outside [0, S = 11)"));
}

}  // namespace
}  // namespace dflash
