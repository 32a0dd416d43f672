// The tensor-core attention backward (cuda/attention/tensor_core_backward_program.hpp) run on the CPU over
// its real grids, warps and lanes with the mma emulated (harness/cuda/host_warp_exec.hpp), on the
// CUDA-core forward's O and lse (so that the backward alone is judged; the two tensor-core
// programs together run in test_trunk_tensor_core_cpu): its gradients and delta against the double reference under SPEC
// §10 with the plain computation of a bf16-operand backward (the CUDA-core programs with
// round_product_operands_to_bf16), the same tiles visited and the same dropout draws as the
// CUDA-core programs, bitwise, and its bits independent of run and of warp and lane order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <span>
#include <vector>

#include "common/tolerances.hpp"
#include "tests/cuda/attention/tensor_core_support.hpp"

namespace dflash {
namespace {

class AttentionTensorCoreBackward : public ::testing::TestWithParam<AttentionCase> {};

INSTANTIATE_TEST_SUITE_P(Cases, AttentionTensorCoreBackward, ::testing::ValuesIn(tensor_core_cases()),
                         [](const auto& info) { return info.param.name; });

// SPEC §10: each gradient's error against the double reference (on the bf16-rounded inputs) is at
// most 2 x the plain computation's + the fp32 floor. The plain computation of a kernel whose
// matrix products take bf16 operands is the textbook one with those operands rounded to bf16 (f P
// and dS; AttentionProblem::round_product_operands_to_bf16): the tensor-core backward rounds
// exactly those values the same way, so beyond it the two differ by fp32 sums in other orders
// (chains of 16-term mmas instead of one running sum), which the floor bounds. delta = dO . O is
// the same fp32 code on the same O in both: bitwise equal.
TEST_P(AttentionTensorCoreBackward, WithinBf16OperandRuleOfReference) {
  const AttentionCase& c = GetParam();
  const AttentionData data = bf16_rounded(AttentionData(c));
  const AttentionResults<double> exact = reference_attention<double>(c, data);
  const AttentionResults<float> plain = program_attention<Bf16Bits>(c, data, kAttentionThreads, false, nullptr, true);
  const AttentionResults<float> got = tensor_core_backward(c, data, plain, false);
  expect_within_rule("dq", got.dq, plain.dq, exact.dq, kAttentionFp32Floor);
  expect_within_rule("dk_ctx", got.dk_ctx, plain.dk_ctx, exact.dk_ctx, kAttentionFp32Floor);
  expect_within_rule("dv_ctx", got.dv_ctx, plain.dv_ctx, exact.dv_ctx, kAttentionFp32Floor);
  expect_within_rule("dk_blk", got.dk_blk, plain.dk_blk, exact.dk_blk, kAttentionFp32Floor);
  expect_within_rule("dv_blk", got.dv_blk, plain.dv_blk, exact.dv_blk, kAttentionFp32Floor);
  expect_within_rule("delta", got.delta, plain.delta, reference_delta(c, data, exact), kAttentionFp32Floor);
  EXPECT_TRUE(bitwise_equal(got.delta, plain.delta));
}

// The wider bound is the price of the bf16 operands, not a looser test. With bf16 storage, O is
// rounded to bf16, so delta = dO . O carries O's 2^-9 rounding into every dS: dQ and dK are
// ~1e-3 relative in both the CUDA-core program and the bf16-operand computation (printed; the
// operand rounding adds at most a factor ~2). dV does not see delta: f P in fp32 gives ~1e-7,
// in bf16 ~1e-3 (printed: the factor is 10^3 to 10^4), and that must show.
TEST_P(AttentionTensorCoreBackward, Bf16OperandsCostPrecisionAgainstTheCudaCoreProgram) {
  const AttentionCase& c = GetParam();
  const AttentionData data = bf16_rounded(AttentionData(c));
  const AttentionResults<double> exact = reference_attention<double>(c, data);
  const AttentionResults<float> fp32_operands = program_attention<Bf16Bits>(c, data, kAttentionThreads, false);
  const AttentionResults<float> bf16_operands =
      program_attention<Bf16Bits>(c, data, kAttentionThreads, false, nullptr, true);
  const auto errors = [&](const char* name, const std::vector<float>& fp32, const std::vector<float>& bf16,
                          const std::vector<double>& want) {
    const double fp32_error = relative_error(std::span(fp32), std::span(want));
    const double bf16_error = relative_error(std::span(bf16), std::span(want));
    std::printf("  %-7s fp32 operands %.2e  bf16 operands %.2e  (x %.3g)\n", name, fp32_error, bf16_error,
                bf16_error / fp32_error);
    return std::pair{fp32_error, bf16_error};
  };
  errors("dq", fp32_operands.dq, bf16_operands.dq, exact.dq);
  errors("dk_ctx", fp32_operands.dk_ctx, bf16_operands.dk_ctx, exact.dk_ctx);
  errors("dk_blk", fp32_operands.dk_blk, bf16_operands.dk_blk, exact.dk_blk);
  for (const auto& [fp32_error, bf16_error] :
       {errors("dv_ctx", fp32_operands.dv_ctx, bf16_operands.dv_ctx, exact.dv_ctx),
        errors("dv_blk", fp32_operands.dv_blk, bf16_operands.dv_blk, exact.dv_blk)}) {
    EXPECT_LT(fp32_error, kAttentionFp32Floor);
    EXPECT_GT(bf16_error, 100 * fp32_error);
  }
}

// The same key tiles (dq) and query blocks (dkv) visited in the same order, and the same (head,
// row, key) elements with the same dropout draws, bitwise, each once per program. Dropout is
// forced on (p = 0.5) as well, so that the draws spell out the visible set of every case.
TEST_P(AttentionTensorCoreBackward, VisitsVisibleSetAndDrawsBitwiseThoseOfCudaCorePrograms) {
  for (const double p : {GetParam().dropout, 0.5}) {
    AttentionCase c = GetParam();
    c.dropout = p;
    SCOPED_TRACE(p);
    const AttentionData data = bf16_rounded(AttentionData(c));
    AttentionProgramTrace cuda_cores, tensor_cores;
    const AttentionResults<float> forward = program_attention<Bf16Bits>(c, data, kAttentionThreads, false, &cuda_cores);
    tensor_core_backward(c, data, forward, false, &tensor_cores);
    EXPECT_EQ(tensor_cores.dq.visited, cuda_cores.dq.visited);
    EXPECT_EQ(tensor_cores.dkv.visited, cuda_cores.dkv.visited);
    for (const auto& [got, want] :
         {std::pair{&tensor_cores.dq, &cuda_cores.dq}, std::pair{&tensor_cores.dkv, &cuda_cores.dkv}}) {
      std::vector<DropoutDrawRecord> a = got->draws, b = want->draws;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b);
      EXPECT_EQ(std::set<DropoutDrawRecord>(a.begin(), a.end()).size(), a.size());
    }
    if (p > 0) {
      EXPECT_FALSE(tensor_cores.dq.draws.empty());
    }
  }
}

// Two runs give the same bits, and so does a run with the warps and the lanes of every warp phase
// in reverse order (and the grid's blocks and threads of every phase reversed): warps share only
// shared memory written before a barrier, the key-gradient tiles are each one warp's, a lane step
// touches its own registers only; a read of anything nothing wrote would be a NaN.
TEST_P(AttentionTensorCoreBackward, BitsIndependentOfRunAndWarpAndLaneOrder) {
  const AttentionCase& c = GetParam();
  const AttentionData data = bf16_rounded(AttentionData(c));
  const AttentionResults<float> forward = program_attention<Bf16Bits>(c, data, kAttentionThreads, false);
  const AttentionResults<float> base = tensor_core_backward(c, data, forward, false);
  for (const bool reverse : {false, true}) {
    const AttentionResults<float> other = tensor_core_backward(c, data, forward, reverse);
    EXPECT_TRUE(bitwise_equal(base.dq, other.dq)) << "reverse " << reverse;
    EXPECT_TRUE(bitwise_equal(base.dk_ctx, other.dk_ctx)) << "reverse " << reverse;
    EXPECT_TRUE(bitwise_equal(base.dv_ctx, other.dv_ctx)) << "reverse " << reverse;
    EXPECT_TRUE(bitwise_equal(base.dk_blk, other.dk_blk)) << "reverse " << reverse;
    EXPECT_TRUE(bitwise_equal(base.dv_blk, other.dv_blk)) << "reverse " << reverse;
    EXPECT_TRUE(bitwise_equal(base.delta, other.delta)) << "reverse " << reverse;
  }
  for (const auto* x : {&base.dq, &base.dk_ctx, &base.dv_ctx, &base.dk_blk, &base.dv_blk, &base.delta}) {
    for (const float v : *x) ASSERT_TRUE(std::isfinite(v));
  }
}

}  // namespace
}  // namespace dflash
