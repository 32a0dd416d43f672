// Every cublasGemmEx call of the loss head (cuda/gemm/cublas_call.hpp), executed on the CPU by a
// textbook column-major GEMM that reads exactly the arguments cuBLAS would get
// (tests/cuda/gemm/textbook_gemm.hpp), and compared with the row-major product the call is meant to
// compute. (The trunk's calls: test_linear_gemm_call.cpp.)
// Shapes have all dimensions distinct, so a transposed operand or a wrong stride cannot pass.
// gemm_calls_within_span: every kind of call the project makes, cut at every span limit from the
// smallest one that still admits a call, run slice by slice against the uncut call, bitwise (integer
// operands: every sum exact in either order); and the cuts the loss head gets at full scale.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "common/bf16.hpp"
#include "cuda/gemm/cublas.hpp"
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

// cuBLAS needs a 256-byte aligned workspace: another is refused before any CUDA call (so on the CPU).
TEST(CublasGemmCall, AWorkspaceOffTheAlignmentIsRefusedBeforeCublasIsCalled) {
  alignas(kCublasWorkspaceAlignment) static unsigned char workspace[2 * kCublasWorkspaceAlignment];
  for (const std::size_t offset : {std::size_t(1), std::size_t(16), kCublasWorkspaceAlignment / 2}) {
    try {
      create_cublas_handle(nullptr, workspace + offset, kCublasWorkspaceAlignment);
      ADD_FAILURE() << "a workspace at offset " << offset << " was accepted";
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("256-byte aligned"), std::string::npos) << e.what();
    }
  }
}

// ---- gemm_calls_within_span ----

// n bf16 integers in [-4, 4]: products and their sums over a few terms are exact in fp32 and bf16,
// so cutting a sum along k cannot change a bit.
std::vector<Bf16Bits> integer_bf16(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<Bf16Bits> out(n);
  for (Bf16Bits& x : out) x = bf16_bits_from_float(static_cast<float>(d(rng)));
  return out;
}

// A buffer of a call: its first element and how many it holds.
struct Buffer {
  const void* data;
  std::size_t elements;
  std::size_t element_bytes;
};

// The operand a slice reads: from the slice's pointer to the end of whichever buffer holds it.
GemmOperand operand_within(std::initializer_list<Buffer> buffers, const void* p) {
  for (const Buffer& buffer : buffers) {
    const auto* begin = static_cast<const char*>(buffer.data);
    const auto* at = static_cast<const char*>(p);
    if (at < begin || at >= begin + buffer.elements * buffer.element_bytes) continue;
    const auto offset = static_cast<std::size_t>(at - begin);
    EXPECT_EQ(offset % buffer.element_bytes, 0u);
    return {p, buffer.elements - offset / buffer.element_bytes, {}};
  }
  ADD_FAILURE() << "a slice's operand points into none of the call's buffers";
  return {p, 0, {}};
}

std::int64_t a_columns(const GemmCall& g) { return g.transa == CUBLAS_OP_N ? g.k : g.m; }
std::int64_t b_columns(const GemmCall& g) { return g.transb == CUBLAS_OP_N ? g.n : g.k; }

// One call of the project's, with its buffers (a and b: its function's two operands, in argument
// order; the call may read them as A and B either way round) (C starts as `c_start`: NaN where beta is 0, so an
// element no slice writes stays NaN).
struct CallCase {
  std::string name;
  std::function<GemmCall(const void* a, const void* b, void* c)> make;
  std::vector<Bf16Bits> a, b;
  std::size_t c_elements;
  bool c_bf16;
  float c_start;
};

template <class T>
void run_slices(const std::vector<GemmCall>& slices, const CallCase& cc, std::vector<T>& c) {
  const Buffer a{cc.a.data(), cc.a.size(), 2}, b{cc.b.data(), cc.b.size(), 2}, cb{c.data(), c.size(), sizeof(T)};
  for (const GemmCall& s : slices) {
    textbook_column_major_gemm(s, operand_within({a, b}, s.a), operand_within({a, b}, s.b), s.c,
                               operand_within({cb}, s.c).elements);
  }
}

// How many slices write each element of the whole call's C (the k slices of one part each count).
std::vector<int> c_coverage(const GemmCall& whole, const std::vector<GemmCall>& slices, std::size_t c_bytes) {
  std::vector<int> count(static_cast<std::size_t>(whole.ldc) * whole.n, 0);
  for (const GemmCall& s : slices) {
    const auto first = static_cast<std::int64_t>((static_cast<const char*>(s.c) - static_cast<const char*>(whole.c)) /
                                                 static_cast<std::ptrdiff_t>(c_bytes));
    for (int j = 0; j < s.n; ++j) {
      for (int i = 0; i < s.m; ++i) ++count.at(static_cast<std::size_t>(first + i + std::int64_t(j) * whole.ldc));
    }
  }
  return count;
}

template <class T>
void expect_slices_compute_the_call(const CallCase& cc) {
  std::vector<T> want(cc.c_elements), got(cc.c_elements);
  const auto fill = [&](std::vector<T>& c) {
    for (std::size_t e = 0; e < c.size(); ++e) {
      const float v = std::isnan(cc.c_start) ? cc.c_start : cc.c_start + static_cast<float>(e % 5);
      if constexpr (std::is_same_v<T, float>) {
        c[e] = v;
      } else {
        c[e] = bf16_bits_from_float(v);
      }
    }
  };
  fill(want);
  const GemmCall whole = cc.make(cc.a.data(), cc.b.data(), want.data());
  run_slices({whole}, cc, want);
  const std::int64_t whole_span =
      std::max({gemm_operand_span(a_columns(whole), whole.lda), gemm_operand_span(b_columns(whole), whole.ldb),
                gemm_operand_span(whole.n, whole.ldc)});
  const std::int64_t smallest = std::max({whole.lda, whole.ldb, whole.ldc});
  bool cut_along_k = false, cut = false;
  for (std::int64_t max_span = smallest; max_span <= whole_span; ++max_span) {
    SCOPED_TRACE(str(cc.name, ", max_span ", max_span));
    fill(got);
    const GemmCall g = cc.make(cc.a.data(), cc.b.data(), got.data());
    std::vector<GemmCall> slices;
    try {
      slices = gemm_calls_within_span(g, max_span);
    } catch (const InputError& e) {
      // Only a bf16 C refuses, and only where a cut along k is needed.
      EXPECT_TRUE(cc.c_bf16) << e.what();
      EXPECT_NE(std::string(e.what()).find("gemm k"), std::string::npos) << e.what();
      continue;
    }
    ASSERT_FALSE(slices.empty());
    if (max_span == whole_span) {
      EXPECT_EQ(slices.size(), 1u);
    }
    cut = cut || slices.size() > 1;
    for (const GemmCall& s : slices) {
      EXPECT_LE(gemm_operand_span(a_columns(s), s.lda), max_span);
      EXPECT_LE(gemm_operand_span(b_columns(s), s.ldb), max_span);
      EXPECT_LE(gemm_operand_span(s.n, s.ldc), max_span);
      EXPECT_GT(s.m, 0);
      EXPECT_GT(s.n, 0);
      EXPECT_GT(s.k, 0);
      EXPECT_EQ(s.transa, g.transa);
      EXPECT_EQ(s.transb, g.transb);
      EXPECT_EQ(s.lda, g.lda);
      EXPECT_EQ(s.ldb, g.ldb);
      EXPECT_EQ(s.ldc, g.ldc);
      cut_along_k = cut_along_k || s.k < g.k;
    }
    run_slices(slices, cc, got);
    // Every element of C is written by the same number of slices (its k slices), and none outside C.
    const std::vector<int> cover = c_coverage(g, slices, sizeof(T));
    for (int j = 0; j < g.n; ++j) {
      for (int i = 0; i < g.m; ++i) {
        EXPECT_EQ(cover[i + std::size_t(j) * g.ldc], cover[0]) << "C(" << i << "," << j << ")";
      }
    }
    for (std::size_t e = 0; e < got.size(); ++e) {
      if constexpr (std::is_same_v<T, float>) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[e]), std::bit_cast<std::uint32_t>(want[e])) << "C[" << e << "]";
      } else {
        ASSERT_EQ(got[e], want[e]) << "C[" << e << "]";
      }
    }
  }
  EXPECT_TRUE(cut) << cc.name << ": no limit cut the call";
  // k is cut where an operand's columns run along it (A not transposed, or B transposed): for an fp32
  // C; a bf16 one refuses instead (above). The "TN" products never need it.
  const bool k_runs_columns = whole.transa == CUBLAS_OP_N || whole.transb == CUBLAS_OP_T;
  EXPECT_EQ(cut_along_k, k_runs_columns && !cc.c_bf16) << cc.name;
}

// rows, out (vocab), in (hidden): distinct, and long enough that every dimension gets cut.
constexpr std::int64_t kR = 6, kO = 7, kI = 5;

TEST(GemmCallsWithinSpan, EveryCallKindCutAtEveryLimitComputesTheUncutProduct) {
  const float nan = std::nanf("");
  const std::vector<CallCase> fp32_cases{
      {"input grad",
       [](const void* a, const void* b, void* c) {
         return input_grad_gemm_call(static_cast<const Bf16Bits*>(a), static_cast<const Bf16Bits*>(b),
                                     static_cast<float*>(c), kR, kO, kI);
       },
       integer_bf16(kR * kO, 11), integer_bf16(kO * kI, 12), kR * kI, false, nan},
      {"linear forward fp32",
       [](const void* a, const void* b, void* c) {
         return linear_forward_gemm_call(static_cast<const Bf16Bits*>(a), static_cast<const Bf16Bits*>(b),
                                         static_cast<float*>(c), kR, kO, kI);
       },
       integer_bf16(kR * kI, 13), integer_bf16(kO * kI, 14), kR * kO, false, nan},
      {"linear input grad, accumulating",
       [](const void* a, const void* b, void* c) {
         return linear_input_grad_gemm_call(static_cast<const Bf16Bits*>(a), static_cast<const Bf16Bits*>(b),
                                            static_cast<float*>(c), kR, kO, kI, true);
       },
       integer_bf16(kR * kO, 15), integer_bf16(kO * kI, 16), kR * kI, false, 3.0f},
      {"linear weight grad",
       [](const void* a, const void* b, void* c) {
         return linear_weight_grad_gemm_call(static_cast<const Bf16Bits*>(a), static_cast<const Bf16Bits*>(b),
                                             static_cast<float*>(c), kR, kO, kI);
       },
       integer_bf16(kR * kO, 17), integer_bf16(kR * kI, 18), kO * kI, false, -2.0f},
  };
  for (const CallCase& cc : fp32_cases) expect_slices_compute_the_call<float>(cc);
  const std::vector<CallCase> bf16_cases{
      {"logits",
       [](const void* a, const void* b, void* c) {
         return logits_gemm_call(static_cast<const Bf16Bits*>(a), static_cast<const Bf16Bits*>(b),
                                 static_cast<Bf16Bits*>(c), kR, kO, kI);
       },
       integer_bf16(kR * kI, 19), integer_bf16(kO * kI, 20), kR * kO, true, nan},
      {"linear forward bf16",
       [](const void* a, const void* b, void* c) {
         return linear_forward_gemm_call(static_cast<const Bf16Bits*>(a), static_cast<const Bf16Bits*>(b),
                                         static_cast<Bf16Bits*>(c), kR, kO, kI);
       },
       integer_bf16(kR * kI, 21), integer_bf16(kO * kI, 22), kR * kO, true, nan},
  };
  for (const CallCase& cc : bf16_cases) expect_slices_compute_the_call<Bf16Bits>(cc);
}

// The loss head at full scale (SPEC's T 32768, H 5120, V 248320): a chunk's products are left
// whole; `materialize`'s logits and dL/dY products (8.1e9-element Z) are cut into row slices of
// 8192 rows, each under 2^31 elements, W read whole by every slice.
TEST(GemmCallsWithinSpan, MaterializeAtFullScaleIsCutIntoRowSlicesUnderTwoToThe31) {
  constexpr std::int64_t T = 32768, H = 5120, V = 248320, chunk = 2048;
  // Addresses only: nothing is read.
  auto* const x = reinterpret_cast<Bf16Bits*>(std::uintptr_t{1} << 40);
  auto* const w = reinterpret_cast<Bf16Bits*>(std::uintptr_t{2} << 40);
  auto* const z = reinterpret_cast<Bf16Bits*>(std::uintptr_t{3} << 40);
  auto* const dx = reinterpret_cast<float*>(std::uintptr_t{4} << 40);
  for (const std::int64_t rows : {chunk, T}) {
    const GemmCall calls[] = {logits_gemm_call(x, w, z, rows, V, H), input_grad_gemm_call(z, w, dx, rows, V, H)};
    for (const GemmCall& g : calls) {
      SCOPED_TRACE(str(rows, " rows, ", g.c_type == CUDA_R_16BF ? "logits" : "input grad"));
      const std::vector<GemmCall> slices = gemm_calls_within_span(g);
      if (rows == chunk) {
        ASSERT_EQ(slices.size(), 1u);
        EXPECT_EQ(slices[0].a, g.a);
        EXPECT_EQ(slices[0].b, g.b);
        EXPECT_EQ(slices[0].c, g.c);
        EXPECT_EQ(slices[0].n, g.n);
        continue;
      }
      ASSERT_EQ(slices.size(), 4u);
      const std::int64_t z_bytes = 2, c_bytes = g.c_type == CUDA_R_16BF ? 2 : 4;
      for (std::size_t s = 0; s < slices.size(); ++s) {
        const GemmCall& c = slices[s];
        const std::int64_t first_row = std::int64_t(s) * 8192;
        EXPECT_EQ(c.n, 8192);
        EXPECT_EQ(c.m, g.m);
        EXPECT_EQ(c.k, g.k);
        EXPECT_EQ(c.beta, 0.0f);
        EXPECT_LT(gemm_operand_span(a_columns(c), c.lda), std::int64_t(1) << 31);
        EXPECT_LT(gemm_operand_span(b_columns(c), c.ldb), std::int64_t(1) << 31);
        EXPECT_LT(gemm_operand_span(c.n, c.ldc), std::int64_t(1) << 31);
        EXPECT_EQ(c.a, g.a) << "W is read whole";
        const auto moved = [](const void* p, const void* base) {
          return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p) -
                                           reinterpret_cast<std::uintptr_t>(base));
        };
        // The row slice's first row of X or dZ, and of Z or dX.
        const std::int64_t b_row = g.c_type == CUDA_R_16BF ? H : V;
        EXPECT_EQ(moved(c.b, g.b), first_row * b_row * (g.c_type == CUDA_R_16BF ? 2 : z_bytes));
        EXPECT_EQ(moved(c.c, g.c), first_row * g.ldc * c_bytes);
      }
    }
  }
}

// The slicing the calls are built from (what the benchmark's gate samples around): the same cuts,
// one call per (n, m, k) slice triple in that order, each call's extents the slices'.
TEST(GemmSlicingWithinSpan, IsTheCutOfTheCallsAndStartsMaterializeSlicesEvery7680ValidRows) {
  constexpr std::int64_t H = 5120, V = 248320;
  for (const std::int64_t rows : {std::int64_t(2048), std::int64_t(30720), std::int64_t(32768)}) {
    for (const GemmCall& g : {logits_gemm_call(nullptr, nullptr, nullptr, rows, V, H),
                              input_grad_gemm_call(nullptr, nullptr, nullptr, rows, V, H)}) {
      SCOPED_TRACE(str(rows, " rows"));
      const GemmSlicing s = gemm_slicing_within_span(g);
      ASSERT_EQ(s.m.size(), 1u);
      ASSERT_EQ(s.k.size(), 1u);
      std::int64_t next = 0;
      for (const GemmSlice& n : s.n) {
        EXPECT_EQ(n.first, next);
        EXPECT_LE(n.count * V, kGemmMaxOperandSpan);
        next += n.count;
      }
      EXPECT_EQ(next, rows);
      if (rows == 2048) {
        EXPECT_EQ(s.n.size(), 1u);
      }
      // The benchmark's valid rows (15 of every 16 of T 32768): 4 slices of 7680.
      if (rows == 30720) {
        ASSERT_EQ(s.n.size(), 4u);
        EXPECT_EQ(s.n[1].first, 7680);
        EXPECT_EQ(s.n[3].first, 23040);
      }
    }
  }
  // Cut along m alone (logits whose W^T, A transposed, is the only wide operand): two calls.
  const GemmCall wide = logits_gemm_call(reinterpret_cast<Bf16Bits*>(std::uintptr_t{1} << 40),
                                         reinterpret_cast<Bf16Bits*>(std::uintptr_t{2} << 40),
                                         reinterpret_cast<Bf16Bits*>(std::uintptr_t{3} << 40), 2, 40, 4);
  const GemmSlicing by_m = gemm_slicing_within_span(wide, 100);  // W^T: 40 columns x ld 4 = 160
  ASSERT_EQ(by_m.m.size(), 2u);
  ASSERT_EQ(by_m.n.size(), 1u);
  ASSERT_EQ(by_m.k.size(), 1u);
  const std::vector<GemmCall> halves = gemm_calls_within_span(wide, 100);
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_EQ(halves[0].m + halves[1].m, 40);
  EXPECT_LE(gemm_operand_span(halves[0].m, halves[0].lda), 100);
  // Cut along n and k (a weight gradient at a small limit): the calls follow the slicing, n outer.
  const GemmCall g = linear_weight_grad_gemm_call(nullptr, nullptr, nullptr, 40, 24, 36);
  const GemmSlicing s = gemm_slicing_within_span(g, 600);
  ASSERT_EQ(s.n.size(), 2u);  // C: 600 / ld 36 = 16 of 24 columns
  ASSERT_EQ(s.m.size(), 1u);
  ASSERT_EQ(s.k.size(), 3u);  // A (N): 600 / ld 36 = 16 of 40 rows
  // Addresses only: nothing is read.
  const GemmCall real = linear_weight_grad_gemm_call(reinterpret_cast<Bf16Bits*>(std::uintptr_t{1} << 40),
                                                     reinterpret_cast<Bf16Bits*>(std::uintptr_t{2} << 40),
                                                     reinterpret_cast<float*>(std::uintptr_t{3} << 40), 40, 24, 36);
  const std::vector<GemmCall> calls = gemm_calls_within_span(real, 600);
  ASSERT_EQ(calls.size(), 6u);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].n, s.n[i / 3].count);
    EXPECT_EQ(calls[i].k, s.k[i % 3].count);
  }
}

TEST(GemmCallsWithinSpan, RefusesABf16CutAlongKAndAColumnWiderThanTheLimit) {
  std::vector<Bf16Bits> dz(kR * kO), w(kO * kI);
  std::vector<float> dx(kR * kI);
  GemmCall g = input_grad_gemm_call(dz.data(), w.data(), dx.data(), kR, kO, kI);
  EXPECT_EQ(gemm_calls_within_span(g, gemm_operand_span(kO, kI) - 1).size() > 1, true);  // fp32: cut along k
  g.c_type = CUDA_R_16BF;
  try {
    gemm_calls_within_span(g, gemm_operand_span(kO, kI) - 1);
    ADD_FAILURE() << "a bf16 C cut along k was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("gemm k"), std::string::npos) << e.what();
  }
  g.c_type = CUDA_R_32F;
  EXPECT_THROW(gemm_calls_within_span(g, std::max({g.lda, g.ldb, g.ldc}) - 1), InputError);
}

}  // namespace
}  // namespace dflash
