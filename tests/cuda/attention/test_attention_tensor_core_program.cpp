// The tensor-core attention forward (cuda/attention/tensor_core_program.hpp) run on the CPU over its real
// grid, warps and lanes, with the mma emulated through the PTX fragment maps
// (harness/cuda/host_warp_exec.hpp): the fragment maps themselves, the emulated instruction, the
// selection rule, and the forward against the CUDA-core program (cuda/attention/simt_program.hpp) and
// the double reference: values within the bf16 rule of SPEC §10, the visited tiles, the visible
// elements and the dropout draws bitwise the same, the bits independent of warp and lane order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/tolerances.hpp"
#include "reference/counter_rng.hpp"
#include "tests/cuda/attention/tensor_core_support.hpp"

namespace dflash {
namespace {

// ---- the m16n8k16 fragment maps -------------------------------------------------------------

template <class Map>
void expect_bijection(Map map, int elements, int rows, int cols, const char* name) {
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    for (int i = 0; i < elements; ++i) {
      const FragmentCoord at = map(lane, i);
      ASSERT_TRUE(at.row >= 0 && at.row < rows && at.col >= 0 && at.col < cols)
          << name << " lane " << lane << " element " << i << ": (" << at.row << ", " << at.col << ")";
      seen.insert({at.row, at.col});
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(rows * cols)) << name << " is not onto its tile";
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kWarpLanes * elements)) << name << " maps two elements to one";
}

TEST(MmaFragments, EachMapIsABijectionOntoItsTile) {
  expect_bijection(mma_a_coord, kMmaAElements, kMmaM, kMmaK, "A");
  expect_bijection(mma_b_coord, kMmaBElements, kMmaK, kMmaN, "B");
  expect_bijection(mma_c_coord, kMmaCElements, kMmaM, kMmaN, "C");
}

// Entries read off the PTX ISA's figures for mma.m16n8k16 (.bf16 A and B, .f32 C): lane 0, lane 5
// (group 1, second lane of its quad) and lane 31 (group 7, last lane of its quad).
TEST(MmaFragments, MapsMatchTheDocumentedLayout) {
  EXPECT_EQ(mma_a_coord(0, 0), (FragmentCoord{0, 0}));
  EXPECT_EQ(mma_a_coord(0, 1), (FragmentCoord{0, 1}));
  EXPECT_EQ(mma_a_coord(0, 2), (FragmentCoord{8, 0}));
  EXPECT_EQ(mma_a_coord(0, 4), (FragmentCoord{0, 8}));
  EXPECT_EQ(mma_a_coord(0, 7), (FragmentCoord{8, 9}));
  EXPECT_EQ(mma_a_coord(5, 0), (FragmentCoord{1, 2}));
  EXPECT_EQ(mma_a_coord(31, 0), (FragmentCoord{7, 6}));
  EXPECT_EQ(mma_a_coord(31, 7), (FragmentCoord{15, 15}));
  EXPECT_EQ(mma_b_coord(0, 0), (FragmentCoord{0, 0}));
  EXPECT_EQ(mma_b_coord(0, 2), (FragmentCoord{8, 0}));
  EXPECT_EQ(mma_b_coord(5, 1), (FragmentCoord{3, 1}));
  EXPECT_EQ(mma_b_coord(31, 0), (FragmentCoord{6, 7}));
  EXPECT_EQ(mma_b_coord(31, 3), (FragmentCoord{15, 7}));
  EXPECT_EQ(mma_c_coord(0, 2), (FragmentCoord{8, 0}));
  EXPECT_EQ(mma_c_coord(5, 1), (FragmentCoord{1, 3}));
  EXPECT_EQ(mma_c_coord(31, 0), (FragmentCoord{7, 6}));
  EXPECT_EQ(mma_c_coord(31, 3), (FragmentCoord{15, 7}));
}

// The accumulators of columns [0, 8) and [8, 16) become the A fragment of the 16 columns: every A
// element of every lane is the bf16 of the C element at the same (row, column).
TEST(MmaFragments, AccumulatorPairIsTheAFragmentOfItsColumns) {
  auto value = [](int row, int col) { return static_cast<float>(row * 16 + col + 1); };  // <= 256: bf16-exact
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    float low[4], high[4];
    for (int i = 0; i < kMmaCElements; ++i) {
      const FragmentCoord at = mma_c_coord(lane, i);
      low[i] = value(at.row, at.col);
      high[i] = value(at.row, at.col + kMmaN);
    }
    std::uint32_t a[4];
    accumulators_to_a_fragment(low, high, a);
    for (int i = 0; i < kMmaAElements; ++i) {
      const FragmentCoord at = mma_a_coord(lane, i);
      EXPECT_EQ(widen(fragment_element(a, i)), value(at.row, at.col)) << "lane " << lane << " element " << i;
    }
  }
}

// The fragment loaders and the emulated instruction compute D = C + A B, for B given as rows of
// its transpose (K rows: S = Q K^T) and as its own rows (V rows: O = P V): the textbook product
// with each dot product summed in fp32 over k ascending, bitwise.
TEST(MmaFragments, EmulatedMmaOfLoadedFragmentsIsTheMatrixProduct) {
  CounterRng rng(0x3A3A);
  auto bf16_tile = [&](int n) {
    std::vector<Bf16Bits> x(static_cast<std::size_t>(n));
    for (Bf16Bits& v : x) narrow_into(static_cast<float>(rng.uniform(-2.0, 2.0)), v);
    return x;
  };
  const std::vector<Bf16Bits> a = bf16_tile(kMmaM * kMmaK), bt = bf16_tile(kMmaN * kMmaK), b = bf16_tile(kMmaK * kMmaN);
  std::vector<float> c(kMmaM * kMmaN);
  for (float& v : c) v = static_cast<float>(rng.uniform(-2.0, 2.0));
  for (const bool transposed : {true, false}) {
    std::uint32_t a_regs[kWarpLanes][4], b_regs[kWarpLanes][2];
    float c_regs[kWarpLanes][4];
    MmaOperands ops[kWarpLanes];
    for (int lane = 0; lane < kWarpLanes; ++lane) {
      load_a_fragment(a.data(), kMmaK, lane, a_regs[lane]);
      if (transposed) {
        load_b_fragment_from_columns(bt.data(), kMmaK, lane, b_regs[lane]);
      } else {
        load_b_fragment_from_rows(b.data(), kMmaN, lane, b_regs[lane]);
      }
      for (int i = 0; i < kMmaCElements; ++i) {
        const FragmentCoord at = mma_c_coord(lane, i);
        c_regs[lane][i] = c[static_cast<std::size_t>(at.row * kMmaN + at.col)];
      }
      ops[lane] = MmaOperands{a_regs[lane], b_regs[lane], c_regs[lane]};
    }
    emulate_warp_mma(ops);
    for (int lane = 0; lane < kWarpLanes; ++lane) {
      for (int i = 0; i < kMmaCElements; ++i) {
        const FragmentCoord at = mma_c_coord(lane, i);
        float expected = c[static_cast<std::size_t>(at.row * kMmaN + at.col)];
        for (int k = 0; k < kMmaK; ++k) {
          const Bf16Bits bk = transposed ? bt[static_cast<std::size_t>(at.col * kMmaK + k)]
                                         : b[static_cast<std::size_t>(k * kMmaN + at.col)];
          expected += widen(a[static_cast<std::size_t>(at.row * kMmaK + k)]) * widen(bk);
        }
        EXPECT_TRUE(same_bits(c_regs[lane][i], expected))
            << (transposed ? "K rows" : "V rows") << " lane " << lane << " element " << i;
      }
    }
  }
}

// The transposed A loader (dK = dS^T Q: A[m][k] read from a row-major [k, m] tile) gives, register
// for register, the A fragment of the transposed tile.
TEST(MmaFragments, TransposedAFragmentIsTheAFragmentOfTheTranspose) {
  CounterRng rng(0x7A7A);
  std::vector<Bf16Bits> tile(kMmaK * kMmaM), transposed(kMmaM * kMmaK);
  for (Bf16Bits& v : tile) narrow_into(static_cast<float>(rng.uniform(-2.0, 2.0)), v);
  for (int k = 0; k < kMmaK; ++k) {
    for (int m = 0; m < kMmaM; ++m) {
      transposed[static_cast<std::size_t>(m * kMmaK + k)] = tile[static_cast<std::size_t>(k * kMmaM + m)];
    }
  }
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    std::uint32_t got[4], want[4];
    load_a_fragment_transposed(tile.data(), kMmaM, lane, got);
    load_a_fragment(transposed.data(), kMmaK, lane, want);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(got[j], want[j]) << "lane " << lane << " register " << j;
  }
}

// ---- the selection rule ---------------------------------------------------------------------

// configs/mid.json (8 heads, 2 kv heads, d 32, B 16) and configs/qwen3.6-27b.json (32, 8, 128,
// B 32), the trunk's key tile 32.
AttentionTiling mid_tiling() { return AttentionTiling{300, 5, 16, 8, 2, 32, 32}; }
AttentionTiling full_scale_tiling() { return AttentionTiling{4096, 1024, 32, 32, 8, 128, 32}; }

void expect_refused(AttentionTiling t, const char* field) {
  EXPECT_FALSE(attention_forward_uses_tensor_cores<Bf16Bits>(t));
  const char* why = attention_tensor_core_problem(t);
  ASSERT_NE(why, nullptr);
  EXPECT_EQ(std::string(why).rfind(field, 0), 0u) << why;
}

TEST(AttentionTensorCoreSelection, ConfigShapesWithBf16StorageUseTensorCores) {
  EXPECT_TRUE(attention_forward_uses_tensor_cores<Bf16Bits>(mid_tiling()));
  EXPECT_TRUE(attention_forward_uses_tensor_cores<Bf16Bits>(full_scale_tiling()));
  EXPECT_EQ(tc_forward_threads(full_scale_tiling()), 8 * kWarpLanes);
}
TEST(AttentionTensorCoreSelection, Fp32StorageUsesCudaCores) {
  EXPECT_FALSE(attention_forward_uses_tensor_cores<float>(mid_tiling()));
}
TEST(AttentionTensorCoreSelection, HeadDimNotAMultipleOf16Refused) {
  auto t = mid_tiling();
  t.d = 24;
  expect_refused(t, "d (head dim) must be a multiple of 16");
}
TEST(AttentionTensorCoreSelection, HeadDimAbove128Refused) {
  auto t = mid_tiling();
  t.d = 144;
  expect_refused(t, "d (head dim) must be <= 128");
}
TEST(AttentionTensorCoreSelection, KeyTileAbove64Refused) {
  auto t = mid_tiling();
  t.key_tile = 80;
  expect_refused(t, "key_tile");
}
// The block's own keys count as much as a context tile's: a block of 80 under a key tile of 32.
TEST(AttentionTensorCoreSelection, BlockAbove64KeysRefused) {
  auto t = mid_tiling();
  t.B = 80;
  t.nh = t.nkv;  // 80 query rows: within the row limit
  expect_refused(t, "key_tile and B");
}
TEST(AttentionTensorCoreSelection, QueryTileAbove128RowsRefused) {
  auto t = full_scale_tiling();
  t.nkv = 4;  // 8 heads per kv head x B 32 = 256 rows
  expect_refused(t, "nh/nkv x B");
}
TEST(AttentionTensorCoreSelection, TilingTheKernelsRefuseIsRefused) {
  auto t = mid_tiling();
  t.nh = 3;
  expect_refused(t, "nh (query heads)");
}

// ---- the forward on the host ----------------------------------------------------------------

class AttentionTensorCore : public ::testing::TestWithParam<AttentionCase> {};

INSTANTIATE_TEST_SUITE_P(Cases, AttentionTensorCore, ::testing::ValuesIn(tensor_core_cases()),
                         [](const auto& info) { return info.param.name; });

// SPEC §10 with the CUDA-core program in bf16 storage as the plain computation, both against the
// double reference on the bf16-rounded inputs. The plain computation rounds O to bf16 (2^-9
// relative); the tensor cores also round P to bf16 before P V, at most 2^-9 relative per term of
// a convex combination: an error of the same size as O's rounding and independent of it, which
// the factor 2 covers (measured: 1.0 to 1.6 x the plain error). Beyond that both are fp32
// arithmetic summed in different orders (the row sums lane-local, then across the quad; lse is
// fp32 statistics in both), which is what the fp32 floor bounds.
TEST_P(AttentionTensorCore, WithinBf16RuleOfCudaCoreProgramAndReference) {
  const AttentionCase& c = GetParam();
  const AttentionData data = bf16_rounded(AttentionData(c));
  const AttentionResults<double> exact = reference_attention<double>(c, data);
  const AttentionResults<float> plain = program_attention<Bf16Bits>(c, data, kAttentionThreads, false);
  const AttentionResults<float> got = tensor_core_forward(c, data, false);
  expect_within_rule("out", got.out, plain.out, exact.out, kAttentionFp32Floor);
  expect_within_rule("lse", got.lse, plain.lse, exact.lse, kAttentionFp32Floor);
}

// The same tiles visited in the same order, and the same (head, row, key) elements visible with
// the same dropout draws: bitwise, each once. Dropout is forced on (p = 0.5) as well, so that the
// draws spell out the visible set of every case, including those without dropout.
TEST_P(AttentionTensorCore, VisitsVisibleSetAndDrawsBitwiseThoseOfCudaCoreProgram) {
  for (const double p : {GetParam().dropout, 0.5}) {
    AttentionCase c = GetParam();
    c.dropout = p;
    SCOPED_TRACE(p);
    const AttentionData data = bf16_rounded(AttentionData(c));
    AttentionProgramTrace cuda_cores;
    program_attention<Bf16Bits>(c, data, kAttentionThreads, false, &cuda_cores);
    HostGridRun tensor_cores;
    tensor_core_forward(c, data, false, &tensor_cores);
    EXPECT_EQ(tensor_cores.visited, cuda_cores.forward.visited);
    std::vector<DropoutDrawRecord> a = tensor_cores.draws, b = cuda_cores.forward.draws;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b);
    EXPECT_EQ(std::set<DropoutDrawRecord>(a.begin(), a.end()).size(), a.size());
    if (p > 0) {
      EXPECT_FALSE(a.empty());
    }
  }
}

// Two runs give the same bits, and so does a run with the warps and the lanes of every warp
// phase in reverse order: warps share nothing between barriers and a lane step touches only its
// own registers (a read of a register or shared memory nothing wrote would be a NaN here).
TEST_P(AttentionTensorCore, BitsIndependentOfRunAndWarpAndLaneOrder) {
  const AttentionCase& c = GetParam();
  const AttentionData data = bf16_rounded(AttentionData(c));
  const AttentionResults<float> base = tensor_core_forward(c, data, false);
  for (const bool reverse : {false, true}) {
    const AttentionResults<float> other = tensor_core_forward(c, data, reverse);
    EXPECT_TRUE(bitwise_equal(base.out, other.out)) << "reverse " << reverse;
    EXPECT_TRUE(bitwise_equal(base.lse, other.lse)) << "reverse " << reverse;
  }
  for (const float o : base.out) ASSERT_TRUE(std::isfinite(o));
  for (const float l : base.lse) ASSERT_TRUE(std::isfinite(l));
}

}  // namespace
}  // namespace dflash
