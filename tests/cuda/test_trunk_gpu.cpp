// The trunk's GPU pieces: the linear layers on cuBLAS against the plain bf16 computation (fp32
// sums of the same bf16 products), the hidden-dropout masks bitwise equal to the CPU's, and one
// drafter layer forward + backward on the GPU run twice (bitwise equal: a recomputed layer is the
// same layer) with finite results. Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "common/bf16.hpp"
#include "cuda/linear_gemm.hpp"
#include "cuda/trunk_elementwise_kernels.hpp"
#include "cuda/trunk_layer_cuda.hpp"
#include "reference/compare.hpp"
#include "reference/counter_rng.hpp"
#include "tests/cuda/attention_program_support.hpp"
#include "tests/cuda/gpu_test_support.hpp"

namespace dflash {
namespace {

using TrunkGpu = GpuTest;

std::vector<Bf16Bits> random_bf16(std::size_t n, std::uint64_t seed) {
  CounterRng rng(seed);
  std::vector<Bf16Bits> x(n);
  for (Bf16Bits& v : x) v = bf16_bits_from_float(static_cast<float>(rng.uniform(-1.0, 1.0)));
  return x;
}

template <class T>
DeviceBuffer<T> on_device(DeviceAllocator& a, const std::vector<T>& host) {
  DeviceBuffer<T> b(a, MemoryCategory::transient, host.size());
  b.upload(host);
  return b;
}

// cuBLAS sums k bf16 products in fp32 in its own order; the plain computation sums them in fp32
// in index order. Both are exact products rounded into an fp32 sum of k <= 96 terms: the floor is
// the project's fp32 floor (tests/cuda/attention_program_support.hpp).
TEST_F(TrunkGpu, LinearProductsWithinRuleOfPlainBf16Computation) {
  const std::int64_t M = 37, out = 24, in = 96;
  const std::vector<Bf16Bits> x = random_bf16(M * in, 1), w = random_bf16(out * in, 2), dy = random_bf16(M * out, 3);
  auto f = [](Bf16Bits b) { return static_cast<double>(float_from_bf16_bits(b)); };
  std::vector<double> y_exact(M * out), dx_exact(M * in), dw_exact(out * in);
  std::vector<float> y_plain(M * out), dx_plain(M * in), dw_plain(out * in, 0.5f);
  for (std::int64_t r = 0; r < M; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      double e = 0;
      float p = 0;
      for (std::int64_t i = 0; i < in; ++i) {
        e += f(x[r * in + i]) * f(w[o * in + i]);
        p += float_from_bf16_bits(x[r * in + i]) * float_from_bf16_bits(w[o * in + i]);
      }
      y_exact[r * out + o] = e;
      y_plain[r * out + o] = p;
    }
    for (std::int64_t i = 0; i < in; ++i) {
      double e = 0;
      float p = 0;
      for (std::int64_t o = 0; o < out; ++o) {
        e += f(dy[r * out + o]) * f(w[o * in + i]);
        p += float_from_bf16_bits(dy[r * out + o]) * float_from_bf16_bits(w[o * in + i]);
      }
      dx_exact[r * in + i] = e;
      dx_plain[r * in + i] = p;
    }
  }
  for (std::int64_t o = 0; o < out; ++o) {
    for (std::int64_t i = 0; i < in; ++i) {
      double e = 0.5;  // weight gradients accumulate onto what is there
      for (std::int64_t r = 0; r < M; ++r) {
        e += f(dy[r * out + o]) * f(x[r * in + i]);
        dw_plain[o * in + i] += float_from_bf16_bits(dy[r * out + o]) * float_from_bf16_bits(x[r * in + i]);
      }
      dw_exact[o * in + i] = e;
    }
  }
  LinearGemm gemm(allocator());
  const auto xd = on_device(allocator(), x), wd = on_device(allocator(), w), dyd = on_device(allocator(), dy);
  DeviceBuffer<float> y(allocator(), MemoryCategory::transient, M * out), dx(allocator(), MemoryCategory::transient, M * in);
  DeviceBuffer<float> dw = on_device(allocator(), std::vector<float>(out * in, 0.5f));
  gemm.forward(xd.data(), wd.data(), y.data(), M, out, in);
  gemm.input_grad(dyd.data(), wd.data(), dx.data(), M, out, in, false);
  gemm.weight_grad(dyd.data(), xd.data(), dw.data(), M, out, in);
  expect_within_rule("y", y.download(), y_plain, y_exact, kAttentionFp32Floor);
  expect_within_rule("dx", dx.download(), dx_plain, dx_exact, kAttentionFp32Floor);
  expect_within_rule("dw", dw.download(), dw_plain, dw_exact, kAttentionFp32Floor);
}

TEST_F(TrunkGpu, HiddenDropoutMasksBitwiseEqualToCpu) {
  const std::int64_t n = 4099;
  const DropoutSiteView view = dropout_site_view(kCaseSeed, kCaseStep, kCaseSequence, 3, DropoutSite::mlp_residual, 0.4);
  const auto ones = on_device(allocator(), std::vector<float>(n, 1.0f));
  DeviceBuffer<float> factors(allocator(), MemoryCategory::transient, n);
  launch_residual_dropout_backward(ones.data(), n, view, factors.data(), allocator().stream());
  const std::vector<float> got = factors.download();
  for (std::int64_t e = 0; e < n; ++e) {
    ASSERT_TRUE(same_bits(got[e], view.factor(static_cast<std::uint64_t>(e)))) << "element " << e;
  }
}

// A layer with the mid config's head layout at a small T, dropout on at all three sites.
TEST_F(TrunkGpu, LayerForwardBackwardTwoRunsBitwiseEqualAndFinite) {
  DrafterDims m;
  m.S = 80, m.N = 3, m.B = 8, m.T = 24, m.H = 64, m.I = 96, m.nh = 4, m.nkv = 2, m.d = 16;
  DeviceAllocator& a = allocator();
  std::uint64_t seed = 10;
  auto bf = [&](std::int64_t n) { return on_device(a, random_bf16(static_cast<std::size_t>(n), seed++)); };
  auto ones = [&](std::int64_t n) { return on_device(a, std::vector<float>(static_cast<std::size_t>(n), 1.0f)); };
  const auto wq = bf(m.q_width() * m.H), wk = bf(m.kv_width() * m.H), wv = bf(m.kv_width() * m.H),
             wo = bf(m.H * m.q_width()), wg = bf(m.I * m.H), wu = bf(m.I * m.H), wd = bf(m.H * m.I);
  const auto n_in = ones(m.H), n_q = ones(m.d), n_k = ones(m.d), n_post = ones(m.H);
  const CudaLayerWeights w{wq.data(), wk.data(), wv.data(), wo.data(), wg.data(), wu.data(), wd.data(),
                           n_in.data(), n_q.data(), n_k.data(), n_post.data()};
  const auto context = bf(m.S * m.H);
  const std::vector<std::int64_t> anchors = {5, 40, 77};
  const std::vector<std::uint8_t> keep = {1, 1, 1};
  std::vector<std::int64_t> block_pos, ctx_pos(static_cast<std::size_t>(m.S));
  std::iota(ctx_pos.begin(), ctx_pos.end(), 0);
  for (std::int64_t i = 0; i < m.T; ++i) block_pos.push_back(anchors[i / m.B] + i % m.B);
  const auto anchors_d = on_device(a, anchors), block_d = on_device(a, block_pos), ctx_d = on_device(a, ctx_pos);
  const auto keep_d = on_device(a, keep);
  CudaLayerContext ctx;
  ctx.dims = m;
  ctx.sliding_window = 32;
  ctx.key_tile = 32;
  ctx.context = context.data();
  ctx.anchors = anchors_d.data();
  ctx.keep = keep_d.data();
  ctx.block_positions = block_d.data();
  ctx.context_positions = ctx_d.data();
  ctx.seed = kCaseSeed;
  ctx.attention_dropout = 0.2;
  ctx.hidden_dropout = 0.1;
  std::vector<float> x_host(static_cast<std::size_t>(m.T * m.H));
  CounterRng rng(99);
  for (float& v : x_host) v = static_cast<float>(rng.uniform(-1.0, 1.0));
  const auto x = on_device(a, x_host);

  auto run = [&] {
    LinearGemm gemm(a);
    CudaLayerActivations act(a, m, MemoryCategory::saved);
    DeviceBuffer<float> y = cuda_layer_forward(a, gemm, ctx, 0, true, w, x.data(), act);
    std::vector<float> result = y.download();
    std::vector<DeviceBuffer<float>> grads;
    for (std::int64_t n : {m.q_width() * m.H, m.kv_width() * m.H, m.kv_width() * m.H, m.H * m.q_width(), m.I * m.H,
                           m.I * m.H, m.H * m.I, m.H, m.d, m.d, m.H}) {
      grads.push_back(on_device(a, std::vector<float>(static_cast<std::size_t>(n), 0.0f)));
    }
    const CudaLayerGrads g{grads[0].data(), grads[1].data(), grads[2].data(), grads[3].data(),
                           grads[4].data(), grads[5].data(), grads[6].data(), grads[7].data(),
                           grads[8].data(), grads[9].data(), grads[10].data()};
    DeviceBuffer<float> d_context = on_device(a, std::vector<float>(static_cast<std::size_t>(m.S * m.H), 0.0f));
    DeviceBuffer<float> d_x = cuda_layer_backward(a, gemm, ctx, 0, true, w, x.data(), act, std::move(y), g,
                                                  d_context.data());
    for (float v : d_x.download()) result.push_back(v);
    for (float v : d_context.download()) result.push_back(v);
    for (const DeviceBuffer<float>& grad : grads) {
      for (float v : grad.download()) result.push_back(v);
    }
    return result;
  };
  const std::vector<float> first = run(), second = run();
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t e = 0; e < first.size(); ++e) {
    ASSERT_TRUE(std::isfinite(first[e])) << "value " << e;
    ASSERT_TRUE(same_bits(first[e], second[e])) << "value " << e;
  }
}

}  // namespace
}  // namespace dflash
