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

// Site-1 dropout element indices (h T + i)(S + T) + key pass 2^32 at full scale (3.9e10 at
// qwen3.6-27b's T = 32768), where every case above stays below 2^18. A sequence of 4096 blocks
// of 16 (T = 65536) puts its last query tile's elements at 4.6e9 to 1.8e10; only that tile runs,
// forward and then dq, through the tensor-core and the CUDA-core programs (the whole grid would
// take minutes on the host). Both must draw the same elements, each by its full 64-bit index.
TEST(AttentionTensorCoreLongSequence, DropoutElementsPast2To32DrawWhatTheCudaCoreProgramsDraw) {
  AttentionCase c{"long_sequence", 4096, 4096, 16, 4, 1, 16, true, 24, 32, 0.5, {}, {}};
  for (std::int64_t n = 0; n < c.N; ++n) c.anchors.push_back(n);  // block n sees context keys [n - 24, n)
  c.keep.assign(static_cast<std::size_t>(c.N), 1);
  const AttentionData data = bf16_rounded(AttentionData(c));
  const auto cast = in_storage<Bf16Bits>;
  const std::vector<Bf16Bits> q = cast(data.q), kc = cast(data.k_ctx), vc = cast(data.v_ctx), kb = cast(data.k_blk),
                              vb = cast(data.v_blk), dout = cast(data.d_out);
  const AttentionProblem pb = attention_problem(c);
  const AttentionTiling tl = pb.tiling;
  const std::int64_t last = tl.query_tiles() - 1;
  ASSERT_TRUE(attention_forward_uses_tensor_cores<Bf16Bits>(tl));

  // One implementation's forward and dq on the last tile: {forward draws, dq draws}, sorted.
  auto draws_of_last_tile = [&](bool tensor_cores) {
    std::vector<Bf16Bits> out(q.size());
    std::vector<float> lse(static_cast<std::size_t>(c.T() * c.nh)), dq(q.size()), dk_ctx(kc.size()), dv_ctx(kc.size()),
        dk_blk(kb.size()), dv_blk(kb.size()), delta(lse.size());
    AttentionOperands<Bf16Bits> in{q.data(), kc.data(), vc.data(), kb.data(), vb.data(), nullptr, nullptr, nullptr};
    const AttentionForwardOutputs<Bf16Bits> fwd{out.data(), lse.data()};
    const AttentionGradients grads{dq.data(), dk_ctx.data(), dv_ctx.data(), dk_blk.data(), dv_blk.data(), delta.data()};
    std::vector<DropoutDrawRecord> forward, backward;
    if (tensor_cores) {
      forward = run_grid_on_host<HostWarpExec>(1, attention_forward_tc_shared_bytes(tl), tc_forward_threads(tl), false,
                                               [&](HostWarpExec& exec, unsigned char* shared, std::int64_t) {
                                                 attention_forward_tc_block(exec, pb, in, fwd, shared, last);
                                               })
                    .draws;
    } else {
      forward = run_grid_on_host(1, attention_forward_shared_bytes<Bf16Bits>(tl), kAttentionThreads, false,
                                 [&](HostBlockExec& exec, unsigned char* shared, std::int64_t) {
                                   attention_forward_block(exec, pb, in, fwd, shared, last);
                                 })
                    .draws;
    }
    in.out = out.data();
    in.d_out = dout.data();
    in.lse = lse.data();
    if (tensor_cores) {
      backward = run_grid_on_host<HostWarpExec>(1, attention_dq_tc_shared_bytes(tl), tc_forward_threads(tl), false,
                                                [&](HostWarpExec& exec, unsigned char* shared, std::int64_t) {
                                                  attention_dq_tc_block(exec, pb, in, grads, shared, last);
                                                })
                     .draws;
    } else {
      backward = run_grid_on_host(1, attention_dq_shared_bytes<Bf16Bits>(tl), kAttentionThreads, false,
                                  [&](HostBlockExec& exec, unsigned char* shared, std::int64_t) {
                                    attention_dq_block(exec, pb, in, grads, shared, last);
                                  })
                     .draws;
    }
    std::sort(forward.begin(), forward.end());
    std::sort(backward.begin(), backward.end());
    return std::pair{forward, backward};
  };
  const auto [tc_forward, tc_dq] = draws_of_last_tile(true);
  const auto [simt_forward, simt_dq] = draws_of_last_tile(false);
  ASSERT_FALSE(simt_forward.empty());
  EXPECT_GT(simt_forward.back().element, std::uint64_t{1} << 32) << "the case no longer reaches past 2^32";
  EXPECT_EQ(tc_forward, simt_forward);
  EXPECT_EQ(tc_dq, simt_dq);
  EXPECT_EQ(simt_dq, simt_forward) << "the backward replays the forward's draws";
}

}  // namespace
}  // namespace dflash
