// The shared-memory bank conflicts of the tensor-core attention programs
// (cuda/attention/tensor_core_program.hpp, tensor_core_backward_program.hpp): every fragment load
// they make from a shared tile (cuda/exec/mma_fragments.hpp), at every row stride they use
// (tc_shared_row_stride of each d and each key count they accept), read by the load functions
// themselves: a tile whose elements hold their own index goes through the load, and the indices
// that come back in each lane's registers are the addresses it read. One warp-wide access is one
// element slot of the fragment over the 32 lanes (each element a 16-bit load); its degree is the
// most distinct 4-byte words it touches in one bank (harness/cuda/shared_bank_trace.hpp's
// bank_ways). The f P and dS stores of the backward (C fragment coordinates, one 16-bit store per
// element) are counted the same way, and so are the dkv program's fp32 dK, dV accumulators (one
// 32-bit access per element, at the program's own AttentionTcBackwardShared::accumulator_index).
// At the tight stride (rows `width` apart, the layout before the padding) the loads from K rows
// and of Q, dO are 8-way, the row-pair loads 4-way and the accumulators 8-way at d 128.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/attention/tensor_core_backward_program.hpp"
#include "harness/cuda/shared_bank_trace.hpp"

namespace dflash {
namespace {

// A [rows, ld] bf16 tile whose element e holds e (all indices fit 16 bits at these sizes).
std::vector<std::uint16_t> indexed_tile(std::int64_t rows, std::int64_t ld) {
  std::vector<std::uint16_t> tile(static_cast<std::size_t>(rows * ld));
  for (std::size_t e = 0; e < tile.size(); ++e) tile[e] = static_cast<std::uint16_t>(e);
  return tile;
}

// The bank-conflict degree of a fragment load over one warp: load(tile, lane, regs) fills `Regs`
// registers of `elements` bf16 each lane; each element slot is one warp-wide 16-bit access.
template <int Regs, class Load>
int fragment_load_ways(const std::vector<std::uint16_t>& tile, Load load) {
  std::vector<SharedAccess> accesses;
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    std::uint32_t regs[Regs];
    load(tile.data(), lane, regs);
    for (int i = 0; i < 2 * Regs; ++i) {
      const std::uint16_t element = fragment_element(regs, i);
      accesses.push_back({0, lane, i, static_cast<std::size_t>(element) * sizeof(std::uint16_t) / kSharedBankBytes});
    }
  }
  return bank_ways(accesses).ways;
}

struct LoadWays {
  int a_rows;        // load_a_fragment: Q, dO rows (forward Q once; backward every product)
  int a_transposed;  // load_a_fragment_transposed: f P, dS (dK = dS^T Q, dV = fP^T dO)
  int b_columns;     // load_b_fragment_from_columns: K, V rows as B^T (S = Q K^T, dP = dO V^T)
  int b_rows;        // load_b_fragment_from_rows: V, K, Q, dO rows as B (P V, dS K, dS^T Q, fP^T dO)
};

// Each load at row stride ld, from a tile of 16 rows (the most a fragment reads) at column
// offset 16 (a second 16-wide chunk, as the programs' kd and kc loops reach).
LoadWays load_ways(std::int64_t ld) {
  const std::vector<std::uint16_t> tile = indexed_tile(kMmaM, ld);
  const std::int64_t col = ld >= 32 + 8 ? kMmaK : 0;
  return {fragment_load_ways<4>(
              tile, [&](const std::uint16_t* t, int lane, std::uint32_t* r) { load_a_fragment(t + col, ld, lane, r); }),
          fragment_load_ways<4>(tile, [&](const std::uint16_t* t, int lane,
                                          std::uint32_t* r) { load_a_fragment_transposed(t + col, ld, lane, r); }),
          fragment_load_ways<2>(tile, [&](const std::uint16_t* t, int lane,
                                          std::uint32_t* r) { load_b_fragment_from_columns(t + col, ld, lane, r); }),
          fragment_load_ways<2>(tile, [&](const std::uint16_t* t, int lane, std::uint32_t* r) {
            load_b_fragment_from_rows(t + col, ld, lane, r);
          })};
}

// The f P / dS stores of tile_gradient_weights: lane (group, t) writes C element i of each 8-key
// fragment nt at row * ld + nt * 8 + col.
int score_store_ways(std::int64_t ld, int nt) {
  std::vector<SharedAccess> accesses;
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    for (int i = 0; i < kMmaCElements; ++i) {
      const FragmentCoord at = mma_c_coord(lane, i);
      const std::int64_t element = at.row * ld + nt * kMmaN + at.col;
      accesses.push_back({0, lane, i, static_cast<std::size_t>(element) * sizeof(std::uint16_t) / kSharedBankBytes});
    }
  }
  return bank_ways(accesses).ways;
}

// The dkv program's accumulator accesses (key_gradients' start and finish) for output tile (kc, c):
// lane (group, t) reads, then writes, C element i at word index(kc * 16 + row, c * 8 + col) of dk
// or dv (one float a word, dk at a 16-byte boundary). Each element slot is one warp-wide access.
template <class Index>
int accumulator_ways(Index index, int kc, int c) {
  std::vector<SharedAccess> accesses;
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    for (int i = 0; i < kMmaCElements; ++i) {
      const FragmentCoord at = mma_c_coord(lane, i);
      accesses.push_back({0, lane, i, static_cast<std::size_t>(index(kc * kMmaK + at.row, c * kMmaN + at.col))});
    }
  }
  return bank_ways(accesses).ways;
}

// The most ways of any output tile of a [keys, d] accumulator.
template <class Index>
int worst_accumulator_ways(Index index, std::int64_t keys, std::int64_t d) {
  int worst = 0;
  for (int kc = 0; kc < keys / kMmaK; ++kc) {
    for (int c = 0; c < d / kMmaN; ++c) worst = std::max(worst, accumulator_ways(index, kc, c));
  }
  return worst;
}

// A tiling at head dim d with 64-key tiles (the most the programs take).
AttentionTiling tiling_of_head_dim(std::int64_t d) {
  return {.S = 256, .N = 2, .B = 64, .nh = 4, .nkv = 2, .d = d, .key_tile = 64};
}

TEST(AttentionTcBanks, AccumulatorsAreTwoWayAtTheirPaddedStrideTheLeastAnyStrideGives) {
  for (std::int64_t d = kMmaK; d <= kTcMaxHeadDim; d += kMmaK) {
    SCOPED_TRACE("d " + std::to_string(d));
    const AttentionTiling tl = tiling_of_head_dim(d);
    ASSERT_EQ(attention_tensor_core_problem(tl), nullptr);
    // The program's own layout and index: carved from a block's shared memory as the kernel does.
    std::vector<unsigned char> shared(attention_dkv_tc_shared_bytes(tl));
    SharedCarver mem(shared.data());
    const AttentionTcBackwardShared sm(mem, tl, true);
    EXPECT_EQ(sm.ld_acc, tc_accumulator_row_stride(d));
    EXPECT_EQ(reinterpret_cast<unsigned char*>(sm.dv) - reinterpret_cast<unsigned char*>(sm.dk),
              tc_tile_keys(tl) * sm.ld_acc * 4);
    for (const float* base : {sm.dk, sm.dv}) {
      const auto word = [&](std::int64_t key, std::int64_t col) {
        return (reinterpret_cast<const unsigned char*>(base + sm.accumulator_index(key, col)) - shared.data()) / 4;
      };
      EXPECT_EQ(worst_accumulator_ways(word, tc_tile_keys(tl), d), 2);
    }
    // No row stride does better: the lanes of one element slot reach 16 banks of one parity at an
    // even stride, and an odd stride puts two of them in one bank too.
    for (std::int64_t ld = d; ld < d + 2 * kSharedBanks; ++ld) {
      const auto word = [&](std::int64_t key, std::int64_t col) { return key * ld + col; };
      EXPECT_GE(worst_accumulator_ways(word, tc_tile_keys(tl), d), 2) << "stride " << ld;
    }
  }
}

// The layout before the padding, rows d apart: 8-way at d 64 and 128.
TEST(AttentionTcBanks, TightAccumulatorRowsConflictEightWays) {
  for (std::int64_t d : {64, 128}) {
    const auto word = [&](std::int64_t key, std::int64_t col) { return key * d + col; };
    EXPECT_EQ(worst_accumulator_ways(word, kTcMaxTileKeys, d), 8) << "d " << d;
  }
}

TEST(AttentionTcSharedRowStride, IsFourModEightWordsForEveryWidthTheProgramsTake) {
  for (std::int64_t width = kMmaK; width <= kTcMaxHeadDim; width += kMmaK) {
    const std::int64_t ld = tc_shared_row_stride(width);
    EXPECT_GE(ld, width);
    EXPECT_EQ(ld % 2, 0) << "rows of whole words, width " << width;
    EXPECT_EQ((ld / 2) % 8, 4) << "width " << width;
    EXPECT_EQ((ld * 2) % 16, 0) << "rows 16-byte aligned, width " << width;
  }
}

TEST(AttentionTcBanks, EveryFragmentLoadIsConflictFreeAtThePaddedStride) {
  for (std::int64_t width = kMmaK; width <= kTcMaxHeadDim; width += kMmaK) {
    const LoadWays w = load_ways(tc_shared_row_stride(width));
    SCOPED_TRACE("width " + std::to_string(width));
    EXPECT_EQ(w.a_rows, 1);
    EXPECT_EQ(w.a_transposed, 1);
    EXPECT_EQ(w.b_columns, 1);
    EXPECT_EQ(w.b_rows, 1);
  }
}

// The layout before the padding, rows d apart: what the test would have caught.
TEST(AttentionTcBanks, TheTightStrideConflictsAtFullScale) {
  const LoadWays w = load_ways(kTcMaxHeadDim);
  EXPECT_EQ(w.a_rows, 8);
  EXPECT_EQ(w.b_columns, 8);
  EXPECT_EQ(w.b_rows, 4);
  EXPECT_EQ(w.a_transposed, 4);
}

TEST(AttentionTcBanks, ScoreStoresAreConflictFreeAtThePaddedStride) {
  for (std::int64_t keys = kMmaK; keys <= kTcMaxTileKeys; keys += kMmaK) {
    for (int nt = 0; nt < keys / kMmaN; ++nt) {
      EXPECT_EQ(score_store_ways(tc_shared_row_stride(keys), nt), 1) << "keys " << keys << ", fragment " << nt;
    }
  }
  EXPECT_EQ(score_store_ways(32, 0), 4) << "rows 32 keys (16 words) apart, unpadded: 4 rows a bank";
}

// The programs lay their tiles out at these strides: the sizes they carve follow them.
TEST(AttentionTcBanks, SharedLayoutsCarveThePaddedRowsAndFitTheCard) {
  // nh / nkv 4, B 32, key tile 32, d 128: the full-scale drafter's tile (128 query rows, 32 keys).
  const AttentionTiling full{.S = 4096, .N = 2, .B = 32, .nh = 32, .nkv = 8, .d = 128, .key_tile = 32};
  const std::int64_t ld = tc_shared_row_stride(128), ld_keys = tc_shared_row_stride(32);
  EXPECT_EQ(attention_forward_tc_shared_bytes(full), std::size_t((128 + 2 * 32) * ld * 2));
  const std::size_t dq = attention_dq_tc_shared_bytes(full), dkv = attention_dkv_tc_shared_bytes(full);
  EXPECT_EQ(dq, std::size_t((2 * 128 + 2 * 32) * ld * 2 + 2 * 128 * ld_keys * 2 + 2 * 128 * 4));
  EXPECT_EQ(dkv - dq, std::size_t(2 * 32 * tc_accumulator_row_stride(128) * 4));
  // The largest tile the programs accept (128 rows, 64 keys, d 128) within sm_90's opt-in shared
  // memory per block (227 KiB = 232,448 B; the launchers read the device's own limit).
  const AttentionTiling largest{.S = 4096, .N = 2, .B = 64, .nh = 16, .nkv = 8, .d = 128, .key_tile = 64};
  ASSERT_EQ(attention_tensor_core_problem(largest), nullptr);
  EXPECT_LE(attention_dkv_tc_shared_bytes(largest), std::size_t(232448));
}

}  // namespace
}  // namespace dflash
