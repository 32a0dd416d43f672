// Every cublasGemmEx call of the trunk's linear layers (cuda/gemm/linear.hpp, its arguments from
// cuda/gemm/cublas_call.hpp) run on the CPU by the textbook column-major GEMM that reads exactly
// cuBLAS's arguments (tests/cuda/gemm/textbook_gemm.hpp), against the row-major product it is meant
// to compute:
//   forward      y[M,out] = x[M,in] W[out,in]^T       (fp32 and bf16 out)
//   input grad   dx[M,in] = dy[M,out] W[out,in]       (overwrite, and + dx with accumulate)
//   weight grad  dW[out,in] = dW + dy[M,out]^T x[M,in] (always accumulated)
// on small matrices with all dimensions distinct (every element, bitwise: same products summed
// in the same order), and on every projection the trunk issues at the shapes of configs/tiny.json,
// mid.json and qwen3.6-27b.json (operands computed from their index: sampled elements, including
// the corners that reach each buffer's last element; the output covered exactly once).
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/bf16.hpp"
#include "cuda/gemm/cublas_call.hpp"
#include "harness/cuda/config_path.hpp"
#include "io/errors.hpp"
#include "reference/drafter_config.hpp"
#include "reference/drafter_dims.hpp"
#include "tests/cuda/gemm/textbook_gemm.hpp"

namespace dflash {
namespace {

std::vector<float> random_f32(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> out(n);
  for (float& x : out) x = d(rng);
  return out;
}

double bf(Bf16Bits x) { return float_from_bf16_bits(x); }

// M rows, out, in: all distinct, so a transposed operand or a wrong stride cannot pass.
constexpr std::int64_t kM = 3, kOut = 7, kIn = 5;

template <class Y>
void expect_forward(const std::vector<Bf16Bits>& x, const std::vector<Bf16Bits>& w, const std::vector<Y>& y) {
  for (std::int64_t r = 0; r < kM; ++r) {
    for (std::int64_t o = 0; o < kOut; ++o) {
      double want = 0;
      for (std::int64_t i = 0; i < kIn; ++i) want += bf(x[r * kIn + i]) * bf(w[o * kIn + i]);
      if constexpr (std::is_same_v<Y, float>) {
        EXPECT_EQ(y[r * kOut + o], static_cast<float>(want)) << "y[" << r << "," << o << "]";
      } else {
        EXPECT_EQ(y[r * kOut + o], bf16_bits_from_float(static_cast<float>(want))) << "y[" << r << "," << o << "]";
      }
    }
  }
}

TEST(LinearGemmCall, ForwardIsXTimesWTransposedInFp32AndBf16) {
  const std::vector<Bf16Bits> x = random_bf16(kM * kIn, 1), w = random_bf16(kOut * kIn, 2);
  std::vector<float> y(kM * kOut, std::nanf(""));  // beta 0: whatever y held is never read
  const GemmCall g = linear_forward_gemm_call(x.data(), w.data(), y.data(), kM, kOut, kIn);
  EXPECT_EQ(g.a, w.data());
  EXPECT_EQ(g.b, x.data());
  EXPECT_EQ(g.c, y.data());
  EXPECT_EQ(g.c_type, CUDA_R_32F);
  textbook_column_major_gemm(g, {g.a, w.size()}, {g.b, x.size()}, g.c, y.size());
  expect_forward(x, w, y);

  std::vector<Bf16Bits> y16(kM * kOut, 0xFFFF);
  const GemmCall g16 = linear_forward_gemm_call(x.data(), w.data(), y16.data(), kM, kOut, kIn);
  EXPECT_EQ(g16.c_type, CUDA_R_16BF);
  textbook_column_major_gemm(g16, {g16.a, w.size()}, {g16.b, x.size()}, g16.c, y16.size());
  expect_forward(x, w, y16);
}

TEST(LinearGemmCall, InputGradIsDyTimesWOverwrittenOrAccumulated) {
  const std::vector<Bf16Bits> dy = random_bf16(kM * kOut, 3), w = random_bf16(kOut * kIn, 4);
  const std::vector<float> before = random_f32(kM * kIn, 5);
  for (const bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    std::vector<float> dx = accumulate ? before : std::vector<float>(kM * kIn, std::nanf(""));
    const GemmCall g = linear_input_grad_gemm_call(dy.data(), w.data(), dx.data(), kM, kOut, kIn, accumulate);
    EXPECT_EQ(g.a, w.data());
    EXPECT_EQ(g.b, dy.data());
    EXPECT_EQ(g.c, dx.data());
    EXPECT_EQ(g.c_type, CUDA_R_32F);
    textbook_column_major_gemm(g, {g.a, w.size()}, {g.b, dy.size()}, g.c, dx.size());
    for (std::int64_t r = 0; r < kM; ++r) {
      for (std::int64_t i = 0; i < kIn; ++i) {
        double want = 0;
        for (std::int64_t o = 0; o < kOut; ++o) want += bf(dy[r * kOut + o]) * bf(w[o * kIn + i]);
        if (accumulate) want += before[r * kIn + i];
        EXPECT_EQ(dx[r * kIn + i], static_cast<float>(want)) << "dx[" << r << "," << i << "]";
      }
    }
  }
}

TEST(LinearGemmCall, WeightGradAddsDyTransposedTimesX) {
  const std::vector<Bf16Bits> dy = random_bf16(kM * kOut, 6), x = random_bf16(kM * kIn, 7);
  const std::vector<float> before = random_f32(kOut * kIn, 8);  // what earlier sequences summed
  std::vector<float> dw = before;
  const GemmCall g = linear_weight_grad_gemm_call(dy.data(), x.data(), dw.data(), kM, kOut, kIn);
  EXPECT_EQ(g.a, x.data());
  EXPECT_EQ(g.b, dy.data());
  EXPECT_EQ(g.c, dw.data());
  EXPECT_EQ(g.c_type, CUDA_R_32F);
  textbook_column_major_gemm(g, {g.a, x.size()}, {g.b, dy.size()}, g.c, dw.size());
  for (std::int64_t o = 0; o < kOut; ++o) {
    for (std::int64_t i = 0; i < kIn; ++i) {
      double want = 0;
      for (std::int64_t r = 0; r < kM; ++r) want += bf(dy[r * kOut + o]) * bf(x[r * kIn + i]);
      want += before[o * kIn + i];
      EXPECT_EQ(dw[o * kIn + i], static_cast<float>(want)) << "dW[" << o << "," << i << "]";
    }
  }
}

// ---- the trunk's real shapes ----------------------------------------------------------------

// An operand of any size, its value a small multiple of 1/8 from a hash of (tag, index): exact in
// bf16 and in a double sum, and different for every buffer.
GemmOperand virtual_operand(const void* identity, std::int64_t elements, std::uint64_t tag) {
  return {identity, static_cast<std::size_t>(elements), [tag](std::int64_t index) {
            const std::uint64_t h = (std::uint64_t(index) + 1) * 0x9E3779B97F4A7C15ull ^ (tag * 0xD1B54A32D192ED03ull);
            return double(std::int64_t((h >> 40) % 17) - 8) / 8.0;
          }};
}

// One projection of the trunk: `rows` rows through W[out, in] (cuda/trunk/layer.hpp, cuda/trunk/stack.hpp).
struct Projection {
  std::string name;
  std::int64_t rows, out, in;
};

// Every linear layer trunk_layer.hpp and trunk.hpp issue (forward, input grad, weight grad each).
std::vector<Projection> trunk_projections(const DrafterDims& m) {
  return {{"fc", m.S, m.H, m.feature_width()},
          {"q_proj", m.T, m.q_width(), m.H},
          {"k_proj ctx", m.S, m.kv_width(), m.H},
          {"v_proj ctx", m.S, m.kv_width(), m.H},
          {"k_proj blk", m.T, m.kv_width(), m.H},
          {"v_proj blk", m.T, m.kv_width(), m.H},
          {"o_proj", m.T, m.H, m.q_width()},
          {"gate_proj", m.T, m.I, m.H},
          {"up_proj", m.T, m.I, m.H},
          {"down_proj", m.T, m.H, m.I}};
}

// Checks sampled elements of the call's C (the four corners and a few inside) against the
// row-major definition `want(r, c)` of the [R, Cols] output, and that (i, j) -> C's index covers
// that output exactly once.
template <class Want>
void expect_sampled(const GemmCall& g, const GemmOperand& a, const GemmOperand& b, const GemmOperand& c, std::int64_t R,
                    std::int64_t cols, Want want) {
  ASSERT_EQ(std::int64_t(g.m) * g.n, R * cols) << "the call does not cover the output";
  ASSERT_EQ(g.ldc, g.m) << "the output's columns overlap or leave gaps";
  std::mt19937 rng(9);
  std::vector<std::pair<int, int>> at = {{0, 0}, {g.m - 1, 0}, {0, g.n - 1}, {g.m - 1, g.n - 1}};
  for (int s = 0; s < 4; ++s) at.emplace_back(int(rng() % unsigned(g.m)), int(rng() % unsigned(g.n)));
  for (const auto& [i, j] : at) {
    const std::int64_t ci = textbook_c_index(g, i, j, c.elements);
    EXPECT_EQ(textbook_element(g, a, b, c, i, j), want(ci / cols, ci % cols)) << "C(" << i << "," << j << ")";
  }
}

void expect_projection_calls(const Projection& p) {
  SCOPED_TRACE(p.name + " rows " + std::to_string(p.rows) + " out " + std::to_string(p.out) + " in " +
               std::to_string(p.in));
  // Distinct addresses name the buffers (never dereferenced: the values come from the index).
  const char ids[5] = {};
  const auto* x = reinterpret_cast<const Bf16Bits*>(&ids[0]);
  const auto* w = reinterpret_cast<const Bf16Bits*>(&ids[1]);
  const auto* dy = reinterpret_cast<const Bf16Bits*>(&ids[2]);
  auto* out32 = reinterpret_cast<float*>(const_cast<char*>(&ids[3]));
  auto* out16 = reinterpret_cast<Bf16Bits*>(const_cast<char*>(&ids[4]));
  const GemmOperand X = virtual_operand(x, p.rows * p.in, 1), W = virtual_operand(w, p.out * p.in, 2),
                    DY = virtual_operand(dy, p.rows * p.out, 3);
  const auto xv = [&](std::int64_t r, std::int64_t i) { return X.value(r * p.in + i); };
  const auto wv = [&](std::int64_t o, std::int64_t i) { return W.value(o * p.in + i); };
  const auto dyv = [&](std::int64_t r, std::int64_t o) { return DY.value(r * p.out + o); };

  for (const GemmCall& g : {linear_forward_gemm_call(x, w, out32, p.rows, p.out, p.in),
                            linear_forward_gemm_call(x, w, out16, p.rows, p.out, p.in)}) {
    ASSERT_EQ(g.a, w);
    ASSERT_EQ(g.b, x);
    expect_sampled(g, W, X, virtual_operand(g.c, p.rows * p.out, 4), p.rows, p.out,
                   [&](std::int64_t r, std::int64_t o) {
                     double s = 0;
                     for (std::int64_t i = 0; i < p.in; ++i) s += xv(r, i) * wv(o, i);
                     return s;
                   });
  }
  for (const bool accumulate : {false, true}) {
    const GemmCall g = linear_input_grad_gemm_call(dy, w, out32, p.rows, p.out, p.in, accumulate);
    ASSERT_EQ(g.a, w);
    ASSERT_EQ(g.b, dy);
    const GemmOperand C = virtual_operand(out32, p.rows * p.in, 5);
    expect_sampled(g, W, DY, C, p.rows, p.in, [&](std::int64_t r, std::int64_t i) {
      double s = 0;
      for (std::int64_t o = 0; o < p.out; ++o) s += dyv(r, o) * wv(o, i);
      return accumulate ? s + C.value(r * p.in + i) : s;
    });
  }
  const GemmCall g = linear_weight_grad_gemm_call(dy, x, out32, p.rows, p.out, p.in);
  ASSERT_EQ(g.a, x);
  ASSERT_EQ(g.b, dy);
  const GemmOperand C = virtual_operand(out32, p.out * p.in, 6);
  expect_sampled(g, X, DY, C, p.out, p.in, [&](std::int64_t o, std::int64_t i) {
    double s = 0;
    for (std::int64_t r = 0; r < p.rows; ++r) s += dyv(r, o) * xv(r, i);
    return s + C.value(o * p.in + i);
  });
}

// T = max_anchors x block_size block rows; S the context the tests use (tiny 11, mid 300: its
// sliding window binds) and the full-scale context (4096; T = 32768 there).
TEST(LinearGemmCall, EveryTrunkProjectionAtTinyMidAndFullScale) {
  for (const auto& [file, S] : {std::pair{"tiny.json", std::int64_t(11)}, std::pair{"mid.json", std::int64_t(300)},
                                std::pair{"qwen3.6-27b.json", std::int64_t(4096)}}) {
    SCOPED_TRACE(file);
    const DrafterConfig c = load_drafter_config(test_config_file(file));
    const DrafterDims m = DrafterDims::of(c, S, c.max_anchors);
    for (const Projection& p : trunk_projections(m)) expect_projection_calls(p);
  }
}

TEST(LinearGemmCall, DimensionsBeyondIntAreRefusedByName) {
  const std::int64_t too_big = std::int64_t(1) << 31;
  try {
    linear_weight_grad_gemm_call(nullptr, nullptr, nullptr, too_big, 8, 8);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("linear rows"), std::string::npos) << e.what();
  }
  EXPECT_THROW(linear_forward_gemm_call(nullptr, nullptr, static_cast<float*>(nullptr), 4, too_big, 8), InputError);
  EXPECT_THROW(linear_input_grad_gemm_call(nullptr, nullptr, nullptr, 4, 8, too_big, false), InputError);
}

}  // namespace
}  // namespace dflash
