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
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/attention/tensor_core_backward_program.hpp"
#include "cuda/exec/shared_access_observer.hpp"
#include "harness/cuda/shared_bank_trace.hpp"
#include "harness/cuda/shared_observer_scope.hpp"
#include "tests/cuda/attention/tensor_core_support.hpp"

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

// The programs as they run: every warp step of the forward, dq and dkv programs over their whole
// grid on the host (HostWarpExec, the emulated mma), each fragment load, f P / dS store, row
// statistic read and accumulator access reported through cuda/exec/shared_access_observer.hpp
// (DFLASH_SHARED) at the address the program computes, and every shared region of the layout that
// a warp step uses seen. What the load-function tests above cannot see: a program that
// carves, stores or loads a tile at another stride than tc_shared_row_stride (consistently, so
// that its results stay right) shows here. The phases' own accesses (tiles copied from global
// memory, zeroing: one thread an element, consecutive) are not reported.
// The layouts' regions, from the programs' own carves of `shared`.
std::vector<SharedRegion> forward_regions(const AttentionTiling& tl, unsigned char* shared) {
  SharedCarver mem(shared);
  const AttentionTcForwardShared sm(mem, tl);
  return {region("q", shared, sm.q, tc_query_rows(tl) * sm.ld), region("k", shared, sm.k, tc_tile_keys(tl) * sm.ld),
          region("v", shared, sm.v, tc_tile_keys(tl) * sm.ld)};
}
std::vector<SharedRegion> backward_regions(const AttentionTiling& tl, unsigned char* shared, bool accumulators) {
  SharedCarver mem(shared);
  const AttentionTcBackwardShared sm(mem, tl, accumulators);
  const std::int64_t rows = tc_query_rows(tl), keys = tc_tile_keys(tl);
  std::vector<SharedRegion> r = {region("q", shared, sm.q, rows * sm.ld),
                                 region("d_out", shared, sm.d_out, rows * sm.ld),
                                 region("k", shared, sm.k, keys * sm.ld),
                                 region("v", shared, sm.v, keys * sm.ld),
                                 region("fp", shared, sm.fp, rows * sm.ld_keys),
                                 region("ds", shared, sm.ds, rows * sm.ld_keys),
                                 region("lse", shared, sm.lse, rows),
                                 region("delta", shared, sm.delta, rows)};
  if (accumulators) {
    r.push_back(region("dk", shared, sm.dk, keys * sm.ld_acc));
    r.push_back(region("dv", shared, sm.dv, keys * sm.ld_acc));
  }
  return r;
}

struct ProgramBanks {
  BankWays tiles, accumulators;  // the worst step outside and inside dK/dV
  std::int64_t accesses = 0, unattributed = 0;
  std::vector<std::string> regions_seen;  // the regions the warp steps accessed
};

// Runs `program` on every block of the grid under the log; `regions(shared)` gives the layout's
// regions in that block's memory (dk and dv: the accumulators).
template <class Program, class Regions>
ProgramBanks trace_tc_program(std::int64_t blocks, std::size_t shared_bytes, int threads, Program program,
                              Regions regions) {
  ProgramBanks result;
  TraceScope scope;
  SharedAccessLog& log = scope.host;
  std::vector<unsigned char> shared(shared_bytes + 16);
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::fill(shared.begin(), shared.end(), 0xFF);
    log.watch(shared.data(), shared_bytes);
    HostWarpExec exec(threads, false);
    program(exec, shared.data(), b);
    EXPECT_TRUE(lanes_in_lockstep(log.accesses(), threads)) << "block " << b << ": lanes diverge";
    result.unattributed += log.unattributed();
    const std::vector<SharedRegion> layout = regions(shared.data());
    note_regions_seen(log.accesses(), layout, result.regions_seen);
    std::vector<SharedAccess> tiles, sums;
    for (const SharedAccess& a : log.accesses()) {
      const std::size_t byte = a.word * kSharedBankBytes;
      bool accumulator = false;
      for (const SharedRegion& r : layout) {
        if (byte >= r.first && byte < r.last) accumulator = std::string(r.name) == "dk" || std::string(r.name) == "dv";
      }
      (accumulator ? sums : tiles).push_back(a);
    }
    for (const auto& [part, worst] : {std::pair{&tiles, &result.tiles}, std::pair{&sums, &result.accumulators}}) {
      const BankWays w = bank_ways(*part);
      if (w.ways > worst->ways) *worst = w;
    }
    result.accesses += static_cast<std::int64_t>(log.accesses().size());
  }
  return result;
}

std::vector<std::string> sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

// Whole tiles only (the context length a multiple of the key tile, the block of 16 keys), so that
// every lane of a warp makes the same accesses: d 128 with 32-key tiles and 128 query rows (the
// full-scale drafter's tile), d 64 with 64-key tiles.
std::vector<AttentionCase> whole_tile_cases() {
  return {{"d128_keys32_rows128", 96, 2, 32, 4, 1, 128, true, 48, 32, 0.1, {40, 95}, {1, 1}},
          {"d64_keys64_rows128", 128, 2, 64, 2, 1, 64, false, 64, 64, 0.1, {50, 127}, {1, 0}}};
}

TEST(AttentionTcBanks, EveryWarpAccessOfThePrograms) {
  for (const AttentionCase& c : whole_tile_cases()) {
    SCOPED_TRACE(c.name);
    const AttentionData data(c);
    const AttentionProblem pb = attention_problem(c);
    const AttentionTiling tl = pb.tiling;
    ASSERT_EQ(attention_tensor_core_problem(tl), nullptr);
    const AttentionResults<float> fwd = tensor_core_forward(c, data, false);  // O and lse for the backward
    const auto cast = in_storage<Bf16Bits>;
    const std::vector<Bf16Bits> q = cast(data.q), kc = cast(data.k_ctx), vc = cast(data.v_ctx), kb = cast(data.k_blk),
                                vb = cast(data.v_blk), dout = cast(data.d_out);
    std::vector<Bf16Bits> out(q.size());
    for (std::size_t e = 0; e < out.size(); ++e) narrow_into(fwd.out[e], out[e]);
    std::vector<float> lse = fwd.lse, lse_out(lse.size()), delta(lse.size());
    std::vector<float> dq(q.size()), dk_ctx(kc.size()), dv_ctx(kc.size()), dk_blk(kb.size()), dv_blk(kb.size());
    std::vector<Bf16Bits> out_fwd(q.size());
    const AttentionOperands<Bf16Bits> in{q.data(),  kc.data(),  vc.data(),   kb.data(),
                                         vb.data(), out.data(), dout.data(), lse.data()};
    const AttentionForwardOutputs<Bf16Bits> outputs{out_fwd.data(), lse_out.data()};
    const AttentionGradients grads{dq.data(), dk_ctx.data(), dv_ctx.data(), dk_blk.data(), dv_blk.data(), delta.data()};
    const int threads = tc_forward_threads(tl);
    const ProgramBanks forward = trace_tc_program(
        tl.query_tiles(), attention_forward_tc_shared_bytes(tl), threads,
        [&](HostWarpExec& exec, unsigned char* shared, std::int64_t b) {
          attention_forward_tc_block(exec, pb, in, outputs, shared, b);
        },
        [&](unsigned char* shared) { return forward_regions(tl, shared); });
    const ProgramBanks dq_banks = trace_tc_program(
        tl.query_tiles(), attention_dq_tc_shared_bytes(tl), threads,
        [&](HostWarpExec& exec, unsigned char* shared, std::int64_t b) {
          attention_dq_tc_block(exec, pb, in, grads, shared, b);
        },
        [&](unsigned char* shared) { return backward_regions(tl, shared, false); });
    const ProgramBanks dkv_banks = trace_tc_program(
        tl.context_tiles() * tl.nkv, attention_dkv_tc_shared_bytes(tl), threads,
        [&](HostWarpExec& exec, unsigned char* shared, std::int64_t b) {
          attention_dkv_tc_block(exec, pb, in, grads, shared, b);
        },
        [&](unsigned char* shared) { return backward_regions(tl, shared, true); });
    // Every region each program reads or writes in its warp steps is seen there: a path whose
    // accesses all bypassed DFLASH_SHARED would leave its region out (one bypassing access among
    // others of its region would not). dq writes f P and dS for the block's own keys, whose dK, dV
    // it computes.
    EXPECT_EQ(forward.regions_seen, sorted({"q", "k", "v"}));
    EXPECT_EQ(dq_banks.regions_seen, sorted({"q", "d_out", "k", "v", "fp", "ds", "lse", "delta"}));
    EXPECT_EQ(dkv_banks.regions_seen, sorted({"q", "d_out", "k", "v", "fp", "ds", "lse", "delta", "dk", "dv"}));
    const struct {
      const char* name;
      const ProgramBanks& banks;
    } programs[] = {{"forward", forward}, {"dq", dq_banks}, {"dkv", dkv_banks}};
    for (const auto& p : programs) {
      std::printf("  %-22s %-7s %9lld lane accesses, tiles worst %d-way (step %lld), accumulators worst %d-way\n",
                  c.name.c_str(), p.name, static_cast<long long>(p.banks.accesses), p.banks.tiles.ways,
                  static_cast<long long>(p.banks.tiles.step), p.banks.accumulators.ways);
      EXPECT_GT(p.banks.accesses, 0) << p.name << ": the trace saw no shared access";
      EXPECT_EQ(p.banks.unattributed, 0) << p.name << ": shared accesses outside a warp step";
      EXPECT_EQ(p.banks.tiles.ways, 1) << p.name << ": a " << p.banks.tiles.ways << "-way conflict, phase "
                                       << p.banks.tiles.phase << ", warp " << p.banks.tiles.warp << ", step "
                                       << p.banks.tiles.step;
    }
    EXPECT_EQ(forward.accumulators.ways, 0);
    EXPECT_EQ(dq_banks.accumulators.ways, 0);
    EXPECT_EQ(dkv_banks.accumulators.ways, 2) << "the accumulators' design (tc_accumulator_row_stride)";
  }
}

// Every warp step reaches shared memory only through DFLASH_SHARED: under a SharedMediation the
// memory itself holds NaN during each step and what a step writes any other way is overwritten, so
// the programs' results equal their plain run's, bit for bit, only if nothing bypasses it (the
// region check above sees a region only when all its accesses bypass it; this sees one access).
TEST(AttentionTcShared, WarpStepsReachSharedMemoryOnlyThroughTheObservedAccesses) {
  for (const AttentionCase& c : whole_tile_cases()) {
    SCOPED_TRACE(c.name);
    const AttentionData data(c);
    const AttentionResults<float> plain = tensor_core_backward(c, data, tensor_core_forward(c, data, false), false);
    std::size_t steps = 0;
    AttentionResults<float> mediated;
    {
      ObserverScope<SharedMediation> scope([](void* address) { return SharedMediation::active()->map(address); });
      mediated = tensor_core_backward(c, data, tensor_core_forward(c, data, false), false);
      steps = scope.host.steps();
    }
    EXPECT_GT(steps, 0u);
    EXPECT_TRUE(bitwise_equal(mediated.out, plain.out)) << "forward O";
    EXPECT_TRUE(bitwise_equal(mediated.lse, plain.lse)) << "forward lse";
    for (const auto& [name, a, b] :
         {std::tuple{"dq", &mediated.dq, &plain.dq}, std::tuple{"dk_ctx", &mediated.dk_ctx, &plain.dk_ctx},
          std::tuple{"dv_ctx", &mediated.dv_ctx, &plain.dv_ctx}, std::tuple{"dk_blk", &mediated.dk_blk, &plain.dk_blk},
          std::tuple{"dv_blk", &mediated.dv_blk, &plain.dv_blk}, std::tuple{"delta", &mediated.delta, &plain.delta}}) {
      EXPECT_TRUE(bitwise_equal(*a, *b)) << name;
    }
  }
}

}  // namespace
}  // namespace dflash
