// The DFlash attention kernels on the GPU (cuda/attention/kernels.hpp), on the CPU tests' cases:
// fp32 storage within the fp32 rule of the double reference, bf16 storage within 2 x the error
// of the same programs run with bf16 storage on the host (the plain bf16 computation), two runs
// bitwise equal, and a tiling the kernels cannot run refused with its field named. The tensor-core
// forward (cuda/attention/tensor_core_program.hpp) on the cases it supports: within the bf16 rule of its
// host emulation (tests/cuda/attention/test_attention_tensor_core_program.cpp) and of the CUDA-core kernel, two runs
// bitwise equal. The tensor-core backward (cuda/attention/tensor_core_backward_program.hpp) likewise: within
// the rule of its host emulation and of the CUDA-core kernels with f P and dS rounded to bf16
// (tests/cuda/attention/test_attention_tensor_core_backward.cpp), two runs bitwise equal.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "common/tolerances.hpp"
#include "cuda/attention/kernels.hpp"
#include "cuda/runtime/bf16_bits.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "reference/compare.hpp"
#include "tests/cuda/attention/simt_support.hpp"
#include "tests/cuda/attention/tensor_core_support.hpp"

namespace dflash {
namespace {

template <class Storage>
struct DeviceAttention {
  DeviceBuffer<std::int64_t> anchors;
  DeviceBuffer<std::uint8_t> keep;
  DeviceBuffer<Storage> q, k_ctx, v_ctx, k_blk, v_blk, d_out, out;
  DeviceBuffer<float> lse, dq, dk_ctx, dv_ctx, dk_blk, dv_blk, delta;

  static DeviceBuffer<Storage> upload(DeviceAllocator& a, const std::vector<double>& x) {
    std::vector<Storage> host(x.size());
    for (std::size_t e = 0; e < x.size(); ++e) narrow_into(static_cast<float>(x[e]), host[e]);
    DeviceBuffer<Storage> b(a, MemoryCategory::transient, host.size());
    b.upload(host);
    return b;
  }

  // Runs forward (the kernel `forward` selects) then backward on the device; returns what came back.
  // `round_product_operands`: AttentionProblem::round_product_operands_to_bf16 for the backward alone
  // (the CUDA-core backward as the plain computation of the tensor-core one, on the same forward: the
  // flag also rounds the CUDA-core forward's f P, which would change O and so delta = dO . O).
  static AttentionResults<float> run(DeviceAllocator& a, const AttentionCase& c, const AttentionData& data,
                                     AttentionForwardKernel forward = AttentionForwardKernel::cuda_cores,
                                     AttentionBackwardKernel backward = AttentionBackwardKernel::cuda_cores,
                                     bool round_product_operands = false) {
    DeviceAttention d;
    d.anchors = DeviceBuffer<std::int64_t>(a, MemoryCategory::transient, c.anchors.size());
    d.anchors.upload(c.anchors);
    d.keep = DeviceBuffer<std::uint8_t>(a, MemoryCategory::transient, c.keep.size());
    d.keep.upload(c.keep);
    d.q = upload(a, data.q);
    d.k_ctx = upload(a, data.k_ctx);
    d.v_ctx = upload(a, data.v_ctx);
    d.k_blk = upload(a, data.k_blk);
    d.v_blk = upload(a, data.v_blk);
    d.d_out = upload(a, data.d_out);
    d.out = DeviceBuffer<Storage>(a, MemoryCategory::transient, data.q.size());
    auto floats = [&](std::size_t n) { return DeviceBuffer<float>(a, MemoryCategory::transient, n); };
    const auto heads = static_cast<std::size_t>(c.T() * c.nh);
    d.lse = floats(heads);
    d.delta = floats(heads);
    d.dq = floats(data.q.size());
    d.dk_ctx = floats(data.k_ctx.size());
    d.dv_ctx = floats(data.k_ctx.size());
    d.dk_blk = floats(data.k_blk.size());
    d.dv_blk = floats(data.k_blk.size());

    AttentionProblem pb = attention_problem(c);
    pb.mask.anchors = d.anchors.data();
    pb.mask.keep = d.keep.data();
    AttentionOperands<Storage> in{d.q.data(),     d.k_ctx.data(), d.v_ctx.data(), d.k_blk.data(),
                                  d.v_blk.data(), nullptr,        nullptr,        nullptr};
    launch_attention_forward<Storage>(pb, in, AttentionForwardOutputs<Storage>{d.out.data(), d.lse.data()}, a.stream(),
                                      forward);
    pb.round_product_operands_to_bf16 = round_product_operands;
    in.out = d.out.data();
    in.d_out = d.d_out.data();
    in.lse = d.lse.data();
    launch_attention_backward<Storage>(pb, in,
                                       AttentionGradients{d.dq.data(), d.dk_ctx.data(), d.dv_ctx.data(),
                                                          d.dk_blk.data(), d.dv_blk.data(), d.delta.data()},
                                       a.stream(), backward);
    AttentionResults<float> r;
    for (const Storage& o : d.out.download()) r.out.push_back(widen(o));
    r.lse = d.lse.download();
    r.dq = d.dq.download();
    r.dk_ctx = d.dk_ctx.download();
    r.dv_ctx = d.dv_ctx.download();
    r.dk_blk = d.dk_blk.download();
    r.dv_blk = d.dv_blk.download();
    r.delta = d.delta.download();
    return r;
  }
};

void expect_all_within_rule(const AttentionResults<float>& got, const AttentionResults<float>& plain,
                            const AttentionResults<double>& exact, double floor) {
  expect_within_rule("out", got.out, plain.out, exact.out, floor);
  expect_within_rule("lse", got.lse, plain.lse, exact.lse, floor);
  expect_within_rule("dq", got.dq, plain.dq, exact.dq, floor);
  expect_within_rule("dk_ctx", got.dk_ctx, plain.dk_ctx, exact.dk_ctx, floor);
  expect_within_rule("dv_ctx", got.dv_ctx, plain.dv_ctx, exact.dv_ctx, floor);
  expect_within_rule("dk_blk", got.dk_blk, plain.dk_blk, exact.dk_blk, floor);
  expect_within_rule("dv_blk", got.dv_blk, plain.dv_blk, exact.dv_blk, floor);
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t e = 0; e < a.size(); ++e) {
    if (!same_bits(a[e], b[e])) return false;
  }
  return true;
}

class AttentionGpu : public GpuTest {};

TEST_F(AttentionGpu, Fp32StorageWithinFp32RuleOfDoubleReference) {
  for (const AttentionCase& c : attention_cases()) {
    SCOPED_TRACE(c.name);
    const AttentionData data(c);
    expect_all_within_rule(DeviceAttention<float>::run(allocator(), c, data), reference_attention<float>(c, data),
                           reference_attention<double>(c, data), kAttentionFp32Floor);
  }
}

// The double reference runs on the bf16-rounded inputs (exact maths on the device's inputs).
TEST_F(AttentionGpu, Bf16StorageWithinRuleOfHostBf16Programs) {
  for (const AttentionCase& c : attention_cases()) {
    SCOPED_TRACE(c.name);
    AttentionData data(c);
    for (std::vector<double>* x : {&data.q, &data.k_ctx, &data.v_ctx, &data.k_blk, &data.v_blk, &data.d_out}) {
      for (double& v : *x) v = round_to_bf16(static_cast<float>(v));
    }
    const AttentionResults<float> plain = program_attention<Bf16Bits>(c, data, kAttentionThreads, false);
    expect_all_within_rule(DeviceAttention<Bf16Bits>::run(allocator(), c, data), plain,
                           reference_attention<double>(c, data), kAttentionBf16Floor);
  }
}

TEST_F(AttentionGpu, TwoRunsBitwiseEqual) {
  for (const AttentionCase& c : attention_cases()) {
    SCOPED_TRACE(c.name);
    const AttentionData data(c);
    const AttentionResults<float> a = DeviceAttention<Bf16Bits>::run(allocator(), c, data);
    const AttentionResults<float> b = DeviceAttention<Bf16Bits>::run(allocator(), c, data);
    EXPECT_TRUE(same(a.out, b.out) && same(a.lse, b.lse) && same(a.dq, b.dq) && same(a.dk_ctx, b.dk_ctx) &&
                same(a.dv_ctx, b.dv_ctx) && same(a.dk_blk, b.dk_blk) && same(a.dv_blk, b.dv_blk));
  }
}

// The device's tensor cores against the same program on the host with the mma emulated: the
// device sums each 16-term dot product in its own order and precision, the rest is the same code,
// so the rule with the host run as the plain computation and the fp32 floor. Against the
// CUDA-core kernel on the device the rule of the CPU test (P rounded to bf16: within 2 x).
TEST_F(AttentionGpu, TensorCoreForwardWithinRuleOfHostEmulationAndCudaCores) {
  for (const AttentionCase& c : tensor_core_cases()) {
    SCOPED_TRACE(c.name);
    const AttentionData data = bf16_rounded(AttentionData(c));
    const AttentionResults<double> exact = reference_attention<double>(c, data);
    const AttentionResults<float> host = tensor_core_forward(c, data, false);
    const AttentionResults<float> got =
        DeviceAttention<Bf16Bits>::run(allocator(), c, data, AttentionForwardKernel::tensor_cores_where_supported);
    const AttentionResults<float> cuda_cores = DeviceAttention<Bf16Bits>::run(allocator(), c, data);
    expect_within_rule("out", got.out, host.out, exact.out, kAttentionFp32Floor);
    expect_within_rule("lse", got.lse, host.lse, exact.lse, kAttentionFp32Floor);
    expect_within_rule("out", got.out, cuda_cores.out, exact.out, kAttentionFp32Floor);
    expect_within_rule("lse", got.lse, cuda_cores.lse, exact.lse, kAttentionFp32Floor);
  }
}

TEST_F(AttentionGpu, TensorCoreForwardTwoRunsBitwiseEqual) {
  for (const AttentionCase& c : tensor_core_cases()) {
    SCOPED_TRACE(c.name);
    const AttentionData data = bf16_rounded(AttentionData(c));
    const auto kernel = AttentionForwardKernel::tensor_cores_where_supported;
    const AttentionResults<float> a = DeviceAttention<Bf16Bits>::run(allocator(), c, data, kernel);
    const AttentionResults<float> b = DeviceAttention<Bf16Bits>::run(allocator(), c, data, kernel);
    EXPECT_TRUE(bitwise_equal(a.out, b.out) && bitwise_equal(a.lse, b.lse));
  }
}

void expect_gradients_within_rule(const AttentionResults<float>& got, const AttentionResults<float>& plain,
                                  const AttentionResults<double>& exact, double floor) {
  expect_within_rule("dq", got.dq, plain.dq, exact.dq, floor);
  expect_within_rule("dk_ctx", got.dk_ctx, plain.dk_ctx, exact.dk_ctx, floor);
  expect_within_rule("dv_ctx", got.dv_ctx, plain.dv_ctx, exact.dv_ctx, floor);
  expect_within_rule("dk_blk", got.dk_blk, plain.dk_blk, exact.dk_blk, floor);
  expect_within_rule("dv_blk", got.dv_blk, plain.dv_blk, exact.dv_blk, floor);
}

// The device's tensor-core backward (after the CUDA-core forward, so that only the backward
// differs) against the same programs on the host with the mma emulated, on the host's run of that
// forward (unrounded f P, as the device's):
// the device sums each 16-term dot product in its own order and precision, the rest is the same
// code, so the rule with the host run as the plain computation and the fp32 floor. Against the
// CUDA-core kernels on the device with f P and dS rounded to bf16: the rule of the CPU test.
TEST_F(AttentionGpu, TensorCoreBackwardWithinRuleOfHostEmulationAndCudaCores) {
  const auto cuda_cores = AttentionForwardKernel::cuda_cores;
  for (const AttentionCase& c : tensor_core_cases()) {
    SCOPED_TRACE(c.name);
    const AttentionData data = bf16_rounded(AttentionData(c));
    const AttentionResults<double> exact = reference_attention<double>(c, data);
    const AttentionResults<float> host = tensor_core_backward(
        c, data, program_attention<Bf16Bits>(c, data, kAttentionThreads, false, nullptr, false), false);
    const AttentionResults<float> got = DeviceAttention<Bf16Bits>::run(
        allocator(), c, data, cuda_cores, AttentionBackwardKernel::tensor_cores_where_supported);
    const AttentionResults<float> plain =
        DeviceAttention<Bf16Bits>::run(allocator(), c, data, cuda_cores, AttentionBackwardKernel::cuda_cores, true);
    expect_gradients_within_rule(got, host, exact, kAttentionFp32Floor);
    expect_gradients_within_rule(got, plain, exact, kAttentionFp32Floor);
    EXPECT_TRUE(bitwise_equal(got.delta, plain.delta));  // the same code on the same O
  }
}

TEST_F(AttentionGpu, TensorCoreBackwardTwoRunsBitwiseEqual) {
  for (const AttentionCase& c : tensor_core_cases()) {
    SCOPED_TRACE(c.name);
    const AttentionData data = bf16_rounded(AttentionData(c));
    const auto forward = AttentionForwardKernel::tensor_cores_where_supported;
    const auto backward = AttentionBackwardKernel::tensor_cores_where_supported;
    const AttentionResults<float> a = DeviceAttention<Bf16Bits>::run(allocator(), c, data, forward, backward);
    const AttentionResults<float> b = DeviceAttention<Bf16Bits>::run(allocator(), c, data, forward, backward);
    EXPECT_TRUE(bitwise_equal(a.dq, b.dq) && bitwise_equal(a.dk_ctx, b.dk_ctx) && bitwise_equal(a.dv_ctx, b.dv_ctx) &&
                bitwise_equal(a.dk_blk, b.dk_blk) && bitwise_equal(a.dv_blk, b.dv_blk) &&
                bitwise_equal(a.delta, b.delta));
  }
}

TEST_F(AttentionGpu, TensorCoreBackwardTilingItCannotRunRefusedWithItsField) {
  AttentionProblem pb = attention_problem(tensor_core_cases().front());
  pb.tiling.key_tile = 80;
  try {
    launch_attention_backward_tensor_cores(pb, AttentionOperands<Bf16Bits>{}, AttentionGradients{}, nullptr);
    FAIL() << "key_tile = 80 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("key_tile"), std::string::npos) << e.what();
  }
}

TEST_F(AttentionGpu, TensorCoreTilingItCannotRunRefusedWithItsField) {
  AttentionProblem pb = attention_problem(tensor_core_cases().front());
  pb.tiling.d = 24;
  try {
    launch_attention_forward_tensor_cores(pb, AttentionOperands<Bf16Bits>{}, AttentionForwardOutputs<Bf16Bits>{},
                                          nullptr);
    FAIL() << "d = 24 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("d (head dim) must be a multiple of 16"), std::string::npos) << e.what();
  }
}

TEST_F(AttentionGpu, BadTilingRefusedWithItsField) {
  AttentionProblem pb = attention_problem(attention_cases().front());
  pb.tiling.nh = 3;
  try {
    launch_attention_forward<float>(pb, AttentionOperands<float>{}, AttentionForwardOutputs<float>{}, nullptr);
    FAIL() << "nh = 3 with nkv = 2 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("nh (query heads)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dflash
