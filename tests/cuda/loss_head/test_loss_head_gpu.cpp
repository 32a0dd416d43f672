// The CUDA loss head against the double reference under SPEC §10's rule for low-precision
// results (reference/bf16_tolerance.hpp: at most twice the error of the plain bf16 computation, plus
// the stated floor), on the shapes of tests/cuda/loss_head/cases.hpp (chosen to hit the edges; the
// CPU backend runs them too: test_loss_head_cpu.cpp).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cuda/loss_head/problem.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "reference/bf16_tolerance.hpp"
#include "reference/loss_head_compare.hpp"
#include "tests/cuda/loss_head/cases.hpp"

namespace dflash {
namespace {

class CudaLossHeadVsReference : public GpuTest, public ::testing::WithParamInterface<CudaCase> {};

TEST_P(CudaLossHeadVsReference, EveryPolicyAndChunkWithinTwicePlainBf16PlusFloor) {
  const CudaCase& c = GetParam();
  MemoryTracker host;
  const LossHeadProblem<double> problem = make_loss_head_problem<double>(host, c.spec);
  const Bf16RuleOracle oracle(problem, c.options(LossPolicy::chunk_recompute, 1));
  const CudaLossHeadProblem device = upload_loss_head_problem(allocator(), oracle.device_problem());

  for (const auto& [policy, chunk] : case_runs(c)) {
    const LossHeadResult<double> r = run_loss_head_cuda(allocator(), host, c.options(policy, chunk), device);
    const Bf16RuleReport report = oracle.check(r);
    EXPECT_TRUE(report.ok()) << loss_policy_name(policy) << " chunk " << chunk << "\n" << report.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaLossHeadVsReference, ::testing::ValuesIn(cuda_cases()),
                         [](const ::testing::TestParamInfo<CudaCase>& info) { return info.param.name; });

class CudaLossHead : public GpuTest {
 protected:
  LossHeadResult<double> run(const LossHeadProblemSpec& spec, const LossHeadOptions& o) {
    const LossHeadProblem<double> p = make_loss_head_problem<double>(host_, spec);
    const CudaLossHeadProblem device = upload_loss_head_problem(allocator(), p);
    return run_loss_head_cuda(allocator(), host_, o, device);
  }
  static LossHeadOptions options(LossPolicy policy, std::int64_t chunk, double tau = 1.0) {
    return {.temperature = tau, .policy = policy, .chunk_rows = chunk};
  }

  MemoryTracker host_;
};

const LossHeadProblemSpec kSpec{.rows = 45, .hidden = 48, .vocab = 1208, .seed = 7, .zero_weight_fraction = 0.2};

// The same chunking, the same products, the same kernels: the two chunked policies differ only in
// when the gradient pass runs, so they agree bit for bit.
TEST_F(CudaLossHead, RecomputeAndGradInForwardAgreeBitwise) {
  for (std::int64_t chunk : {1, 8, 45}) {
    const LossHeadResult<double> a = run(kSpec, options(LossPolicy::chunk_recompute, chunk, 0.7));
    const LossHeadResult<double> b = run(kSpec, options(LossPolicy::chunk_grad_in_forward, chunk, 0.7));
    EXPECT_TRUE(loss_head_results_identical(a, b)) << "chunk " << chunk;
  }
}

TEST_F(CudaLossHead, RepeatedRunsAreBitwiseIdentical) {
  for (LossPolicy policy : {LossPolicy::materialize, LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward}) {
    const LossHeadResult<double> a = run(kSpec, options(policy, 16));
    const LossHeadResult<double> b = run(kSpec, options(policy, 16));
    EXPECT_TRUE(loss_head_results_identical(a, b)) << loss_policy_name(policy);
  }
}

TEST_F(CudaLossHead, ZeroGlobalWeightGivesExactZeros) {
  LossHeadProblemSpec spec = kSpec;
  spec.all_weights_zero = true;
  for (LossPolicy policy : {LossPolicy::materialize, LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward}) {
    const LossHeadResult<double> r = run(spec, options(policy, 10));
    EXPECT_EQ(r.stats.loss, 0.0);
    EXPECT_EQ(r.stats.ce, 0.0);
    EXPECT_EQ(r.stats.kl, 0.0);
    for (double g : r.hidden_grad.values()) ASSERT_EQ(g, 0.0) << loss_policy_name(policy);
    EXPECT_GT(r.stats.valid_rows, 0);  // the rows are still there: only their weight is 0
  }
}

// Rows with w = 0 get exactly zero gradient; rows with w01 = 0 (whose teacher rows are NaN in this
// problem: they must never be read) get zero lse, token loss and gradient.
TEST_F(CudaLossHead, ZeroWeightAndInvalidRowsContributeExactZeros) {
  MemoryTracker t;
  const LossHeadProblem<double> p = make_loss_head_problem<double>(t, kSpec);
  const LossHeadResult<double> r = run(kSpec, options(LossPolicy::chunk_recompute, 7));
  int zero_weight_valid_rows = 0, invalid_rows = 0;
  for (std::int64_t i = 0; i < kSpec.rows; ++i) {
    if (p.weights[i] != 0) continue;
    for (std::int64_t h = 0; h < kSpec.hidden; ++h) ASSERT_EQ(r.hidden_grad[i * kSpec.hidden + h], 0.0) << "row " << i;
    if (p.valid[i] == 0) {
      ++invalid_rows;
      EXPECT_EQ(r.lse[i], 0.0);
      EXPECT_EQ(r.token_loss[i], 0.0);
    } else {
      ++zero_weight_valid_rows;
      EXPECT_NE(r.lse[i], 0.0);
    }
  }
  EXPECT_GT(zero_weight_valid_rows, 0);  // the problem has both kinds of row
  EXPECT_GT(invalid_rows, 0);
}

TEST_F(CudaLossHead, EmptyBatchGivesZerosAndAnEmptyGradient) {
  LossHeadProblemSpec spec = kSpec;
  spec.rows = 0;
  const LossHeadResult<double> r = run(spec, options(LossPolicy::chunk_recompute, 4));
  EXPECT_EQ(r.stats.loss, 0.0);
  EXPECT_EQ(r.stats.valid_rows, 0);
  EXPECT_EQ(r.hidden_grad.numel(), 0);
}

}  // namespace
}  // namespace dflash
