// The trunk (cuda/trunk/stack.hpp: the code the GPU runs) on the CPU backend with bf16 storage and the
// tensor-core attention forward switched on (HostBackend::attention_forward_kernel, the same switch
// as CudaBackend's; its mma emulated on the host, harness/cuda/host_warp_exec.hpp). On mid (d 32) the
// tensor-core forward runs: Y, every parameter gradient and dL/dF stay within SPEC §10's bf16 rule
// of the double reference, the plain computation being the same trunk with the CUDA-core forward
// (P rounded to bf16 is one more rounding of the size of O's, as in test_attention_tensor_core_program), and
// differ from it (the switch took effect). On tiny (d 4) no layer's shape is supported: the switch
// falls back to the CUDA-core forward and the trunk is bitwise the plain one. With the
// tensor-core backward switched on as well (HostBackend::attention_backward_kernel), the plain
// computation is the trunk with the CUDA-core programs, the backward's f P and dS rounded to bf16
// (HostBackend::round_attention_product_operands: the operands the tensor cores take in bf16).
// Its numbers beside the plain trunk's (fp32 f P, dS) show what the bf16 operands cost.
#include <gtest/gtest.h>

#include <cstdio>

#include "common/tolerances.hpp"
#include "harness/cuda/host_backend.hpp"
#include "tests/cuda/trunk/twin_support.hpp"

namespace dflash {
namespace {

constexpr auto kTensorCores = AttentionForwardKernel::tensor_cores_where_supported;

TEST(TrunkTensorCoreForward, MidWithinBf16RuleOfDoubleReferenceAndNotThePlainBits) {
  TrunkProblem p(TrunkCase{"mid.json", 300, 4});
  p.round_to_device_formats();
  ASSERT_TRUE(attention_forward_uses_tensor_cores<Bf16Bits>(
      AttentionTiling{p.dims.S, p.dims.N, p.dims.B, p.dims.nh, p.dims.nkv, p.dims.d, 32}));
  const TrunkValues<double> exact = reference_trunk<double>(p);
  MemoryTracker host;
  const TrunkValues<float> plain = run_trunk(HostBackend<Bf16Bits>{host}, p, TrunkPolicy::per_layer, 1);
  const TrunkValues<float> got = run_trunk(HostBackend<Bf16Bits>{host, kTensorCores}, p, TrunkPolicy::per_layer, 1);
  expect_trunk_within_rule(p, got, plain, exact, kAttentionFp32Floor);
  EXPECT_NE(got.hidden, plain.hidden) << "the tensor-core forward did not run";
}

TEST(TrunkTensorCoreForwardAndBackward, MidWithinBf16OperandRuleOfDoubleReference) {
  TrunkProblem p(TrunkCase{"mid.json", 300, 4});
  p.round_to_device_formats();
  ASSERT_TRUE(attention_backward_uses_tensor_cores<Bf16Bits>(
      AttentionTiling{p.dims.S, p.dims.N, p.dims.B, p.dims.nh, p.dims.nkv, p.dims.d, 32}));
  const TrunkValues<double> exact = reference_trunk<double>(p);
  MemoryTracker host;
  const auto cuda_cores = AttentionForwardKernel::cuda_cores;
  const auto cuda_core_backward = AttentionBackwardKernel::cuda_cores;
  const TrunkValues<float> plain =
      run_trunk(HostBackend<Bf16Bits>{host, cuda_cores, cuda_core_backward, true}, p, TrunkPolicy::per_layer, 1);
  const TrunkValues<float> got =
      run_trunk(HostBackend<Bf16Bits>{host, kTensorCores, AttentionBackwardKernel::tensor_cores_where_supported}, p,
                TrunkPolicy::per_layer, 1);
  expect_trunk_within_rule(p, got, plain, exact, kAttentionFp32Floor);
  EXPECT_NE(got.grads, plain.grads) << "the tensor-core backward did not run";
  std::printf("the plain trunk with fp32 f P and dS, against the same reference:\n");
  const TrunkValues<float> fp32_operands = run_trunk(HostBackend<Bf16Bits>{host}, p, TrunkPolicy::per_layer, 1);
  expect_trunk_within_rule(p, fp32_operands, plain, exact, kAttentionFp32Floor);
}

TEST(TrunkTensorCoreForward, UnsupportedShapeFallsBackToTheCudaCoreForwardBitwise) {
  TrunkProblem p(TrunkCase{"tiny.json", 11, 4});
  p.round_to_device_formats();
  ASSERT_FALSE(attention_forward_uses_tensor_cores<Bf16Bits>(
      AttentionTiling{p.dims.S, p.dims.N, p.dims.B, p.dims.nh, p.dims.nkv, p.dims.d, 32}));
  MemoryTracker host;
  const TrunkValues<float> plain = run_trunk(HostBackend<Bf16Bits>{host}, p, TrunkPolicy::per_layer, 1);
  const TrunkValues<float> got = run_trunk(HostBackend<Bf16Bits>{host, kTensorCores}, p, TrunkPolicy::per_layer, 1);
  EXPECT_EQ(got.hidden, plain.hidden);
  EXPECT_EQ(got.grads, plain.grads);
  EXPECT_EQ(got.features_grad, plain.features_grad);
}

}  // namespace
}  // namespace dflash
