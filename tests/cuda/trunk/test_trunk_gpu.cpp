// The trunk's GPU pieces: the linear layers on cuBLAS against the plain bf16 computation (fp32
// sums of the same bf16 products), the hidden-dropout masks bitwise equal to the CPU's, and one
// drafter layer forward + backward on the GPU run twice (bitwise equal: a recomputed layer is the
// same layer) with finite results; the trunk under every policy, bitwise equal, with the saved
// and transient peaks of its memory plan. Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "common/bf16.hpp"
#include "common/tolerances.hpp"
#include "cuda/gemm/linear.hpp"
#include "cuda/trunk/device_backend.hpp"
#include "cuda/trunk/elementwise_kernels.hpp"
#include "cuda/trunk/stack.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "planner/cuda_trunk_memory.hpp"
#include "reference/compare.hpp"
#include "reference/counter_rng.hpp"
#include "tests/cuda/attention/simt_support.hpp"

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
// the project's fp32 floor (tests/cuda/attention/simt_support.hpp).
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
  DeviceBuffer<float> y(allocator(), MemoryCategory::transient, M * out),
      dx(allocator(), MemoryCategory::transient, M * in);
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
  const DropoutSiteView view =
      dropout_site_view(kCaseSeed, kCaseStep, kCaseSequence, 3, DropoutSite::mlp_residual, 0.4);
  const auto ones = on_device(allocator(), std::vector<float>(n, 1.0f));
  DeviceBuffer<float> factors(allocator(), MemoryCategory::transient, n);
  launch_residual_dropout_backward(ones.data(), n, view, factors.data(), allocator().stream());
  const std::vector<float> got = factors.download();
  for (std::int64_t e = 0; e < n; ++e) {
    ASSERT_TRUE(same_bits(got[e], view.factor(static_cast<std::uint64_t>(e)))) << "element " << e;
  }
}

// Random bf16 weights of an L-layer trunk (norm weights 1), one sequence's device inputs, and
// the fp32 gradient buffers, for the mid config's head layout at a small T; dropout on at all
// three sites.
struct RandomDeviceTrunk {
  DrafterDims m;
  std::int64_t K = 2;
  std::vector<DeviceBuffer<Bf16Bits>> matrices;
  std::vector<DeviceBuffer<float>> vectors;
  DeviceBuffer<std::int64_t> anchors, block_positions, context_positions, tokens;
  DeviceBuffer<std::uint8_t> keep;
  DeviceBuffer<Bf16Bits> features, context;
  TrunkWeights<Bf16Bits> weights;
  TrunkLayerContext<Bf16Bits> ctx;

  explicit RandomDeviceTrunk(DeviceAllocator& a) {
    m.S = 80, m.N = 3, m.B = 8, m.T = 24, m.H = 64, m.I = 96, m.nh = 4, m.nkv = 2, m.d = 16, m.L = 3, m.V = 50;
    std::uint64_t seed = 10;
    auto bf = [&](std::int64_t n) {
      matrices.push_back(on_device(a, random_bf16(static_cast<std::size_t>(n), seed++)));
      return matrices.back().data();
    };
    auto ones = [&](std::int64_t n) {
      vectors.push_back(on_device(a, std::vector<float>(static_cast<std::size_t>(n), 1.0f)));
      return vectors.back().data();
    };
    matrices.reserve(64);
    vectors.reserve(64);
    weights.embed_tokens = bf(m.V * m.H);
    weights.fc = bf(m.H * K * m.H);
    weights.hidden_norm = ones(m.H);
    weights.norm = ones(m.H);
    for (std::int64_t l = 0; l < m.L; ++l) {
      weights.layers.push_back(LayerWeights<Bf16Bits>{
          bf(m.q_width() * m.H), bf(m.kv_width() * m.H), bf(m.kv_width() * m.H), bf(m.H * m.q_width()), bf(m.I * m.H),
          bf(m.I * m.H), bf(m.H * m.I), ones(m.H), ones(m.d), ones(m.d), ones(m.H)});
      weights.sliding.push_back(l + 1 < m.L);
    }
    const std::vector<std::int64_t> anchor_values = {5, 40, 77};
    std::vector<std::int64_t> block_pos, ctx_pos(static_cast<std::size_t>(m.S)), toks;
    std::iota(ctx_pos.begin(), ctx_pos.end(), 0);
    for (std::int64_t i = 0; i < m.T; ++i) {
      block_pos.push_back(anchor_values[i / m.B] + i % m.B);
      toks.push_back(i % m.B == 0 ? (i * 7) % (m.V - 1) : m.V - 1);  // anchor token or the mask token
    }
    anchors = on_device(a, anchor_values);
    keep = on_device(a, std::vector<std::uint8_t>{1, 0, 1});
    block_positions = on_device(a, block_pos);
    context_positions = on_device(a, ctx_pos);
    tokens = on_device(a, toks);
    features = on_device(a, random_bf16(static_cast<std::size_t>(m.S * K * m.H), 97));
    context = on_device(a, random_bf16(static_cast<std::size_t>(m.S * m.H), 98));
    ctx.dims = m;
    ctx.sliding_window = 32;
    ctx.key_tile = 32;
    ctx.context = context.data();
    ctx.anchors = anchors.data();
    ctx.keep = keep.data();
    ctx.block_positions = block_positions.data();
    ctx.context_positions = context_positions.data();
    ctx.seed = kCaseSeed;
    ctx.attention_dropout = 0.2;
    ctx.hidden_dropout = 0.1;
  }

  // Zeroed fp32 gradient buffers in the layout of TrunkGrads, all under `gradients`.
  struct Grads {
    std::vector<DeviceBuffer<float>> buffers;
    TrunkGrads view;
    std::vector<float> download() const {
      std::vector<float> all;
      for (const DeviceBuffer<float>& b : buffers) {
        for (float v : b.download()) all.push_back(v);
      }
      return all;
    }
  };
  Grads zero_grads(DeviceAllocator& a) const {
    Grads g;
    g.buffers.reserve(64);
    auto zeros = [&](std::int64_t n) {
      g.buffers.push_back(DeviceBuffer<float>(a, MemoryCategory::gradients, static_cast<std::size_t>(n)));
      g.buffers.back().zero();
      return g.buffers.back().data();
    };
    g.view.fc = zeros(m.H * K * m.H);
    g.view.hidden_norm = zeros(m.H);
    g.view.norm = zeros(m.H);
    g.view.target_features = zeros(m.S * K * m.H);
    for (std::int64_t l = 0; l < m.L; ++l) {
      g.view.layers.push_back(LayerGrads{zeros(m.q_width() * m.H), zeros(m.kv_width() * m.H), zeros(m.kv_width() * m.H),
                                         zeros(m.H * m.q_width()), zeros(m.I * m.H), zeros(m.I * m.H), zeros(m.H * m.I),
                                         zeros(m.H), zeros(m.d), zeros(m.d), zeros(m.H)});
    }
    return g;
  }
};

void expect_bitwise_finite(const std::vector<float>& first, const std::vector<float>& second) {
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t e = 0; e < first.size(); ++e) {
    ASSERT_TRUE(std::isfinite(first[e])) << "value " << e;
    ASSERT_TRUE(same_bits(first[e], second[e])) << "value " << e;
  }
}

TEST_F(TrunkGpu, LayerForwardBackwardTwoRunsBitwiseEqualAndFinite) {
  DeviceAllocator& a = allocator();
  const RandomDeviceTrunk t(a);
  const std::vector<float> x_host = [&] {
    std::vector<float> v(static_cast<std::size_t>(t.m.T * t.m.H));
    CounterRng rng(99);
    for (float& e : v) e = static_cast<float>(rng.uniform(-1.0, 1.0));
    return v;
  }();
  const auto x = on_device(a, x_host);
  auto run = [&] {
    LinearGemm gemm(a);
    const CudaBackend be{a, gemm};
    TrunkLayerActivations<CudaBackend> act(be, t.m, MemoryCategory::saved);
    DeviceBuffer<float> y = trunk_layer_forward(be, t.ctx, 0, true, t.weights.layers[0], x.data(), act);
    std::vector<float> result = y.download();
    const RandomDeviceTrunk::Grads g = t.zero_grads(a);
    DeviceBuffer<float> d_context = on_device(a, std::vector<float>(static_cast<std::size_t>(t.m.S * t.m.H), 0.0f));
    DeviceBuffer<float> d_x = trunk_layer_backward(be, t.ctx, 0, true, t.weights.layers[0], x.data(), act, std::move(y),
                                                   g.view.layers[0], d_context.data());
    for (const std::vector<float>& part : {d_x.download(), d_context.download(), g.download()}) {
      result.insert(result.end(), part.begin(), part.end());
    }
    return result;
  };
  expect_bitwise_finite(run(), run());
}

// Every policy: the same Y and gradients bitwise (recomputation is the same computation), and
// the device peaks of `saved` and `transient` exactly the CUDA trunk's memory plan
// (planner/cuda_trunk_memory.hpp, bf16 storage); dL/dY is handed over as a gradient, as the loss
// head does, and Y freed once read, as the step does after the loss head.
TEST_F(TrunkGpu, PoliciesBitwiseEqualAndPeaksAsPlanned) {
  DeviceAllocator& a = allocator();
  const RandomDeviceTrunk t(a);
  const DrafterDims& m = t.m;
  struct Run {
    TrunkPolicy policy;
    std::int64_t every;
  };
  const std::vector<Run> runs = {{TrunkPolicy::none, 1}, {TrunkPolicy::per_layer, 1}, {TrunkPolicy::every_k, 2}};
  std::vector<float> first;
  for (const Run& r : runs) {
    SCOPED_TRACE(trunk_policy_name(r.policy));
    LinearGemm gemm(a);
    const CudaBackend be{a, gemm};
    const RandomDeviceTrunk::Grads g = t.zero_grads(a);
    a.reset_peaks();
    const std::size_t saved_before = a.tracker().current(MemoryCategory::saved);
    const std::size_t transient_before = a.tracker().current(MemoryCategory::transient);  // the GEMM workspace
    Trunk<CudaBackend> trunk(be, t.weights, t.ctx, t.K, t.features.data(), t.tokens.data(), r.policy, r.every);
    DeviceBuffer<Bf16Bits> y = trunk.forward();
    std::vector<float> result;
    for (Bf16Bits v : y.download()) result.push_back(float_from_bf16_bits(v));
    y.release();
    // dL/dY: Y itself in fp32 (any fixed upstream gradient would do).
    DeviceBuffer<float> d_hidden(a, MemoryCategory::gradients, result.size());
    d_hidden.upload(result);
    trunk.backward(std::move(d_hidden), g.view);
    const CudaTrunkMemory plan = cuda_trunk_memory(m, r.policy, r.every, sizeof(Bf16Bits));
    EXPECT_EQ(a.tracker().current(MemoryCategory::saved), saved_before) << "backward frees what forward kept";
    EXPECT_EQ(a.tracker().peak(MemoryCategory::saved), saved_before + std::size_t(plan.saved_bytes));
    EXPECT_EQ(a.tracker().peak(MemoryCategory::transient), transient_before + std::size_t(plan.transient_bytes));
    const std::vector<float> grads = g.download();
    result.insert(result.end(), grads.begin(), grads.end());
    if (first.empty()) {
      first = result;
    } else {
      expect_bitwise_finite(first, result);
    }
  }
}

}  // namespace
}  // namespace dflash
