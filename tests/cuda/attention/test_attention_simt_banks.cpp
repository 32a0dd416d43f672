// The shared-memory bank conflicts of the CUDA-core attention programs (cuda/attention/simt_program.hpp),
// measured on the host: every program runs over its real grid and thread partition
// (kAttentionThreads) on storage that reports each access (harness/cuda/shared_bank_trace.hpp) and,
// for the fp32 score tiles, accumulators and row statistics, through DFLASH_SHARED
// (harness/cuda/shared_observer_scope.hpp); no warp-wide access may touch more distinct words of
// one bank than the design's degree (kAttentionSharedBankWays; kAttentionRowWrapBankWays for fp32
// rows of d 40, which wrap in the tile loads), and every region of each program's layout must show
// in the trace. With rows d apart (the layout before
// the padding) the score loops' 32 lanes read 32 rows at one column: a 32-way conflict at d = 128.
// With the score tiles row-major (before score_index), the forward's softmax, a thread per row, was
// 32-way at 32 keys a tile and 8-way at 40.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "harness/cuda/shared_bank_trace.hpp"
#include "harness/cuda/shared_observer_scope.hpp"
#include "tests/cuda/attention/simt_support.hpp"

namespace dflash {
namespace {

// bank_ways on accesses written by hand: 32 lanes, one access each.
std::vector<SharedAccess> one_step(std::size_t first_word, std::size_t lane_stride_words) {
  std::vector<SharedAccess> a;
  for (int lane = 0; lane < kWarpLanes; ++lane) a.push_back({0, lane, 0, first_word + lane * lane_stride_words});
  return a;
}

TEST(SharedBankWays, CountsDistinctWordsPerBank) {
  EXPECT_EQ(bank_ways(one_step(3, 1)).ways, 1);    // consecutive words: every bank once
  EXPECT_EQ(bank_ways(one_step(3, 0)).ways, 1);    // one word: a broadcast
  EXPECT_EQ(bank_ways(one_step(0, 64)).ways, 32);  // bf16 rows of d = 128
  EXPECT_EQ(bank_ways(one_step(0, 65)).ways, 1);   // the padded rows
  EXPECT_EQ(bank_ways(one_step(0, 2)).ways, 2);
  std::vector<SharedAccess> two_warps = one_step(0, 32);
  for (SharedAccess& a : two_warps) a.thread = (a.thread % 2) * kWarpLanes;  // 16 lanes per warp
  EXPECT_EQ(bank_ways(two_warps).ways, 16);
  std::vector<SharedAccess> two_steps = one_step(0, 32);
  for (SharedAccess& a : two_steps) a.step = a.thread % 2;  // 16 accesses per step
  EXPECT_EQ(bank_ways(two_steps).ways, 16);
}

TEST(SharedBankWays, LockstepNeedsEqualCountsPerWarp) {
  std::vector<SharedAccess> a = one_step(0, 1);
  EXPECT_TRUE(lanes_in_lockstep(a, kAttentionThreads));
  a.push_back({0, 5, 1, 0});
  EXPECT_FALSE(lanes_in_lockstep(a, kAttentionThreads));
}

TEST(AttentionSharedRowStride, OddWordsAtLeastD) {
  for (std::int64_t d = 1; d <= 256; ++d) {
    const std::int64_t f = attention_shared_row_stride<float>(d), b = attention_shared_row_stride<std::uint16_t>(d);
    EXPECT_GE(f, d);
    EXPECT_GE(b, d);
    EXPECT_EQ(f % 2, 1) << "fp32 rows of d " << d;
    EXPECT_EQ(b % 2, 0) << "bf16 rows of d " << d << " must be whole words";
    EXPECT_EQ((b / 2) % 2, 1) << "bf16 rows of d " << d;
    EXPECT_LE(f, d + 1);
    EXPECT_LE(b, d + 3);
  }
}

struct BankCase {
  AttentionCase shape;
  int bf16_ways, fp32_ways;  // the design's degree with each storage
};

// Every visited tile wholly visible (anchors on tile boundaries, full attention) and every loop
// a whole number of passes over the 128 threads: each lane of a warp then makes the same
// accesses in each phase, so step s of all 32 lanes is one instruction (the test checks it).
std::vector<BankCase> bank_cases() {
  return {
      {{"d128_tiles32", 96, 1, 16, 2, 1, 128, false, 0, 32, 0.1, {64}, {1}},
       kAttentionSharedBankWays,
       kAttentionSharedBankWays},
      {{"d128_tiles40", 120, 1, 16, 2, 1, 128, false, 0, 40, 0.0, {80}, {1}},
       kAttentionSharedBankWays,
       kAttentionSharedBankWays},
      // d not a multiple of 32: key_grads' lanes span two keys (the score tiles' padded stride
      // keeps them 1-way); fp32 rows of 41 words wrap in the tile loads
      {{"d40_tiles32", 96, 1, 16, 2, 1, 40, false, 0, 32, 0.1, {64}, {1}},
       kAttentionSharedBankWays,
       kAttentionRowWrapBankWays},
  };
}

class AttentionBanks : public ::testing::TestWithParam<BankCase> {};
INSTANTIATE_TEST_SUITE_P(Cases, AttentionBanks, ::testing::ValuesIn(bank_cases()),
                         [](const auto& info) { return info.param.shape.name; });

// The worst conflict of one program over every block of its grid; fails where lanes diverge.
struct ProgramBanks {
  BankWays worst;
  std::int64_t accesses = 0;
  std::vector<std::string> regions_seen;  // the layout's regions the accesses fell in (sorted)
};

// Runs `program` on every block of the grid under the log; `regions(shared)` gives the layout's
// regions in that block's memory.
template <class Program, class Regions>
ProgramBanks trace_program(std::int64_t blocks, std::size_t shared_bytes, Program program, Regions regions) {
  ProgramBanks result;
  TraceScope scope;  // TracedStorage's accesses and the fp32 scratch's (DFLASH_SHARED) go to its log
  SharedAccessLog& log = scope.host;
  std::vector<unsigned char> shared(shared_bytes + 16);
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::fill(shared.begin(), shared.end(), 0xFF);
    log.watch(shared.data(), shared_bytes);
    SharedTraceExec exec(kAttentionThreads, false);
    program(exec, shared.data(), b);
    EXPECT_TRUE(lanes_in_lockstep(log.accesses(), kAttentionThreads)) << "block " << b << ": lanes diverge";
    EXPECT_EQ(log.unattributed(), 0) << "block " << b << ": shared accesses outside the phases";
    note_regions_seen(log.accesses(), regions(shared.data()), result.regions_seen);
    const BankWays w = bank_ways(log.accesses());
    if (w.ways > result.worst.ways) result.worst = w;
    result.accesses += static_cast<std::int64_t>(log.accesses().size());
  }
  return result;
}

std::vector<std::string> sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

// The layouts' regions, from the programs' own carves of `shared`.
template <class Storage>
std::vector<SharedRegion> forward_regions(const AttentionTiling& tl, unsigned char* shared) {
  SharedCarver mem(shared);
  const AttentionForwardShared<Storage> sm(mem, tl);
  const std::int64_t R = tl.query_rows(), KT = tl.max_tile_keys();
  return {region("q", shared, sm.q, R * sm.row),    region("k", shared, sm.k, KT * sm.row),
          region("v", shared, sm.v, KT * sm.row),   region("p", shared, sm.p, KT * score_stride(R)),
          region("acc", shared, sm.acc, R * tl.d),  region("row_max", shared, sm.row_max, R),
          region("row_sum", shared, sm.row_sum, R), region("rescale", shared, sm.rescale, R)};
}
template <class Storage>
std::vector<SharedRegion> tile_regions(const attention_program_detail::BackwardTile<Storage>& s,
                                       const AttentionTiling& tl, unsigned char* shared) {
  const std::int64_t R = tl.query_rows(), KT = tl.max_tile_keys();
  return {region("q", shared, s.q, R * s.row),
          region("d_out", shared, s.d_out, R * s.row),
          region("k", shared, s.k, KT * s.row),
          region("v", shared, s.v, KT * s.row),
          region("lse", shared, s.lse, R),
          region("delta", shared, s.delta, R),
          region("fp", shared, s.fp, KT * score_stride(R)),
          region("ds", shared, s.ds, KT * score_stride(R))};
}
template <class Storage>
std::vector<SharedRegion> dq_regions(const AttentionTiling& tl, unsigned char* shared) {
  SharedCarver mem(shared);
  const AttentionDqShared<Storage> sm(mem, tl);
  std::vector<SharedRegion> r = tile_regions(sm.tile, tl, shared);
  r.push_back(region("dq", shared, sm.dq, tl.query_rows() * tl.d));
  return r;
}
template <class Storage>
std::vector<SharedRegion> dkv_regions(const AttentionTiling& tl, unsigned char* shared) {
  SharedCarver mem(shared);
  const AttentionDkvShared<Storage> sm(mem, tl);
  std::vector<SharedRegion> r = tile_regions(sm.tile, tl, shared);
  r.push_back(region("dk", shared, sm.dk, tl.max_tile_keys() * tl.d));
  r.push_back(region("dv", shared, sm.dv, tl.max_tile_keys() * tl.d));
  return r;
}

template <class Raw>
void expect_design_ways(const BankCase& bc, const char* storage) {
  using Storage = TracedStorage<Raw>;
  const int design_ways = sizeof(Raw) == 2 ? bc.bf16_ways : bc.fp32_ways;
  const AttentionCase& c = bc.shape;
  const AttentionData data(c);
  const auto cast = in_storage<Storage>;
  const std::vector<Storage> q = cast(data.q), kc = cast(data.k_ctx), vc = cast(data.v_ctx), kb = cast(data.k_blk),
                             vb = cast(data.v_blk), dout = cast(data.d_out);
  const AttentionProblem pb = attention_problem(c);
  const AttentionTiling tl = pb.tiling;
  std::vector<Storage> out(q.size());
  std::vector<float> lse(static_cast<std::size_t>(c.T() * c.nh)), delta(lse.size());
  std::vector<float> dq(q.size()), dk_ctx(kc.size()), dv_ctx(kc.size()), dk_blk(kb.size()), dv_blk(kb.size());
  AttentionOperands<Storage> in{q.data(), kc.data(), vc.data(), kb.data(), vb.data(), nullptr, nullptr, nullptr};
  const AttentionForwardOutputs<Storage> fwd{out.data(), lse.data()};
  const ProgramBanks forward = trace_program(
      tl.query_tiles(), attention_forward_shared_bytes<Storage>(tl),
      [&](SharedTraceExec& exec, unsigned char* shared, std::int64_t b) {
        attention_forward_block(exec, pb, in, fwd, shared, b);
      },
      [&](unsigned char* shared) { return forward_regions<Storage>(tl, shared); });
  in.out = out.data();
  in.d_out = dout.data();
  in.lse = lse.data();
  const AttentionGradients grads{dq.data(), dk_ctx.data(), dv_ctx.data(), dk_blk.data(), dv_blk.data(), delta.data()};
  const ProgramBanks dq_banks = trace_program(
      tl.query_tiles(), attention_dq_shared_bytes<Storage>(tl),
      [&](SharedTraceExec& exec, unsigned char* shared, std::int64_t b) {
        attention_dq_block(exec, pb, in, grads, shared, b);
      },
      [&](unsigned char* shared) { return dq_regions<Storage>(tl, shared); });
  const ProgramBanks dkv_banks = trace_program(
      tl.context_tiles() * tl.nkv, attention_dkv_shared_bytes<Storage>(tl),
      [&](SharedTraceExec& exec, unsigned char* shared, std::int64_t b) {
        attention_dkv_block(exec, pb, in, grads, shared, b);
      },
      [&](unsigned char* shared) { return dkv_regions<Storage>(tl, shared); });
  const struct {
    const char* name;
    const ProgramBanks& banks;
    std::vector<std::string> regions;  // every region the program uses
  } programs[] = {{"forward", forward, sorted({"q", "k", "v", "p", "acc", "row_max", "row_sum", "rescale"})},
                  {"dq", dq_banks, sorted({"q", "d_out", "k", "v", "lse", "delta", "fp", "ds", "dq"})},
                  {"dkv", dkv_banks, sorted({"q", "d_out", "k", "v", "lse", "delta", "fp", "ds", "dk", "dv"})}};
  for (const auto& p : programs) {
    std::printf("  %-5s %-7s %10lld shared accesses, worst %2d-way (phase %d, warp %d, step %lld)\n", storage, p.name,
                static_cast<long long>(p.banks.accesses), p.banks.worst.ways, p.banks.worst.phase, p.banks.worst.warp,
                static_cast<long long>(p.banks.worst.step));
    EXPECT_GT(p.banks.accesses, 0) << p.name << ": the trace saw no shared access";
    EXPECT_EQ(p.banks.regions_seen, p.regions) << storage << " " << p.name << ": a region's accesses bypass the trace";
    EXPECT_LE(p.banks.worst.ways, design_ways)
        << storage << " " << p.name << ": " << p.banks.worst.ways << "-way bank conflict in phase "
        << p.banks.worst.phase << ", warp " << p.banks.worst.warp << ", step " << p.banks.worst.step
        << " (design: " << design_ways << ")";
  }
}

TEST_P(AttentionBanks, Bf16RowsWithinDesignDegree) { expect_design_ways<std::uint16_t>(GetParam(), "bf16"); }
TEST_P(AttentionBanks, Fp32RowsWithinDesignDegree) { expect_design_ways<float>(GetParam(), "fp32"); }

}  // namespace
}  // namespace dflash
