// Every cublasGemmEx call of the loss head (cuda/gemm/cublas_call.hpp), executed on the CPU by a
// textbook column-major GEMM that reads exactly the arguments cuBLAS would get
// (tests/cuda/gemm/textbook_gemm.hpp), and compared with the row-major product the call is meant to
// compute. (The trunk's calls: test_linear_gemm_call.cpp.)
// Shapes have all dimensions distinct, so a transposed operand or a wrong stride cannot pass.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/bf16.hpp"
#include "cuda/gemm/cublas_call.hpp"
#include "io/errors.hpp"
#include "tests/cuda/gemm/textbook_gemm.hpp"

namespace dflash {
namespace {

double bf(Bf16Bits x) { return float_from_bf16_bits(x); }

constexpr std::int64_t kRows = 3, kVocab = 7, kHidden = 5;

// Every handle's math mode: reductions in fp32 (the bf16 twin's order of rounding), never TF32.
TEST(CublasGemmCall, MathModeReducesInTheComputeTypeWithoutTf32) {
  EXPECT_NE(kGemmMathMode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, 0);
  EXPECT_EQ(kGemmMathMode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, CUBLAS_DEFAULT_MATH);
}

TEST(CublasGemmCall, LogitsAreXTimesWTransposedRowMajorInBf16) {
  const std::vector<Bf16Bits> x = random_bf16(kRows * kHidden, 1), w = random_bf16(kVocab * kHidden, 2);
  std::vector<Bf16Bits> z(kRows * kVocab, 0xFFFF);
  const GemmCall g = logits_gemm_call(x.data(), w.data(), z.data(), kRows, kVocab, kHidden);
  EXPECT_EQ(g.a, w.data());
  EXPECT_EQ(g.b, x.data());
  EXPECT_EQ(g.c, z.data());
  EXPECT_EQ(g.c_type, CUDA_R_16BF);
  EXPECT_EQ(g.beta, 0.0f);
  textbook_column_major_gemm(g, {g.a, w.size()}, {g.b, x.size()}, g.c, z.size());
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t v = 0; v < kVocab; ++v) {
      double want = 0;
      for (std::int64_t h = 0; h < kHidden; ++h) want += bf(x[r * kHidden + h]) * bf(w[v * kHidden + h]);
      EXPECT_EQ(z[r * kVocab + v], bf16_bits_from_float(static_cast<float>(want))) << "z[" << r << "," << v << "]";
    }
  }
}

TEST(CublasGemmCall, InputGradIsDzTimesWRowMajorInFp32) {
  const std::vector<Bf16Bits> dz = random_bf16(kRows * kVocab, 3), w = random_bf16(kVocab * kHidden, 4);
  std::vector<float> dx(kRows * kHidden, -1.0f);
  const GemmCall g = input_grad_gemm_call(dz.data(), w.data(), dx.data(), kRows, kVocab, kHidden);
  EXPECT_EQ(g.a, w.data());
  EXPECT_EQ(g.b, dz.data());
  EXPECT_EQ(g.c, dx.data());
  EXPECT_EQ(g.c_type, CUDA_R_32F);
  EXPECT_EQ(g.beta, 0.0f);
  textbook_column_major_gemm(g, {g.a, w.size()}, {g.b, dz.size()}, g.c, dx.size());
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t h = 0; h < kHidden; ++h) {
      double want = 0;
      for (std::int64_t v = 0; v < kVocab; ++v) want += bf(dz[r * kVocab + v]) * bf(w[v * kHidden + h]);
      EXPECT_EQ(dx[r * kHidden + h], static_cast<float>(want)) << "dx[" << r << "," << h << "]";
    }
  }
}

TEST(CublasGemmCall, DimensionsBeyondIntAreRefusedByName) {
  const std::int64_t too_big = std::int64_t(1) << 31;
  EXPECT_THROW(
      {
        try {
          logits_gemm_call(nullptr, nullptr, nullptr, 1, too_big, 8);
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("vocab_size"), std::string::npos) << e.what();
          throw;
        }
      },
      InputError);
  EXPECT_THROW(input_grad_gemm_call(nullptr, nullptr, nullptr, too_big, 8, 8), InputError);
}

}  // namespace
}  // namespace dflash
