// The DFlash attention kernels' programs (cuda/attention/simt_program.hpp) run on the CPU over their
// real grids and thread partition (harness/cuda/host_block_exec.hpp), against the double reference
// (reference/attention.hpp): the mask and the dropout draws bitwise, the values within the fp32
// rule of SPEC §10, the tile schedule exactly (skipped tiles are never visited), and the bits
// independent of the thread partition.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/tolerances.hpp"
#include "reference/compare.hpp"
#include "tests/cuda/attention/simt_support.hpp"

namespace dflash {
namespace {

class AttentionProgram : public ::testing::TestWithParam<AttentionCase> {};

INSTANTIATE_TEST_SUITE_P(Cases, AttentionProgram, ::testing::ValuesIn(attention_cases()),
                         [](const auto& info) { return info.param.name; });

bool reference_sees(const VisibleKeys& v, std::int64_t S, std::int64_t key) {
  return key < S ? v.context_begin <= key && key < v.context_end : v.block_begin <= key - S && key - S < v.block_end;
}

TEST_P(AttentionProgram, MaskMatchesReferenceOnEveryQueryKeyPair) {
  const AttentionCase& c = GetParam();
  const AttentionMask ref = c.reference_mask();
  const AttentionMaskView view = c.mask_view();
  std::int64_t visible = 0;
  for (std::int64_t i = 0; i < c.T(); ++i) {
    const VisibleKeys v = ref.visible(i);
    for (std::int64_t key = 0; key < c.S + c.T(); ++key) {
      const bool sees = view.visible(i / c.B, i % c.B, key);
      ASSERT_EQ(sees, reference_sees(v, c.S, key)) << "row " << i << " key " << key;
      visible += sees ? 1 : 0;
    }
  }
  EXPECT_GT(visible, 0);
}

// One test per field the kernels refuse (the launchers throw with this text).
AttentionTiling good_tiling() { return AttentionTiling{20, 4, 4, 4, 2, 8, 4}; }
TEST(AttentionTiling, GoodTilingHasNoProblem) { EXPECT_EQ(attention_tiling_problem(good_tiling()), nullptr); }
void expect_problem(AttentionTiling t, const char* field) {
  const char* problem = attention_tiling_problem(t);
  ASSERT_NE(problem, nullptr);
  EXPECT_EQ(std::string(problem).rfind(field, 0), 0u) << problem;
}
TEST(AttentionTiling, NegativeContextRefused) {
  auto t = good_tiling();
  t.S = -1;
  expect_problem(t, "S ");
}
TEST(AttentionTiling, NoBlocksRefused) {
  auto t = good_tiling();
  t.N = 0;
  expect_problem(t, "N ");
}
TEST(AttentionTiling, EmptyBlockRefused) {
  auto t = good_tiling();
  t.B = 0;
  expect_problem(t, "B ");
}
TEST(AttentionTiling, NoKvHeadsRefused) {
  auto t = good_tiling();
  t.nkv = 0;
  expect_problem(t, "nkv ");
}
TEST(AttentionTiling, HeadsNotAMultipleOfKvHeadsRefused) {
  auto t = good_tiling();
  t.nh = 3;
  expect_problem(t, "nh ");
}
TEST(AttentionTiling, ZeroHeadDimRefused) {
  auto t = good_tiling();
  t.d = 0;
  expect_problem(t, "d ");
}
TEST(AttentionTiling, ZeroKeyTileRefused) {
  auto t = good_tiling();
  t.key_tile = 0;
  expect_problem(t, "key_tile ");
}

TEST(AttentionDropoutElement, IsTheSpecIndex) {
  // SPEC §6 site 1: (h T + i)(S + T) + j. h = 2, i = 3, j = 5, S = 7, T = 11: (22 + 3) 18 + 5.
  EXPECT_EQ(attention_dropout_element(2, 3, 5, 7, 11), 455u);
  // Beyond 32 bits: h = 31, i = T - 1, j = S + T - 1 at the full-scale T = 32768, S = 4096.
  const std::uint64_t T = 32768, S = 4096;
  EXPECT_EQ(attention_dropout_element(31, 32767, 36863, 4096, 32768), (31 * T + 32767) * (S + T) + 36863);
}

TEST_P(AttentionProgram, ValuesWithinFp32RuleOfDoubleReference) {
  const AttentionCase& c = GetParam();
  const AttentionData data(c);
  const AttentionResults<double> exact = reference_attention<double>(c, data);
  const AttentionResults<float> plain = reference_attention<float>(c, data);
  const AttentionResults<float> got = program_attention<float>(c, data, kAttentionThreads, false);
  auto check = [&](const char* name, const std::vector<float>& g, const std::vector<float>& p,
                   const std::vector<double>& e) { expect_within_rule(name, g, p, e, kAttentionFp32Floor); };
  check("out", got.out, plain.out, exact.out);
  check("lse", got.lse, plain.lse, exact.lse);
  check("dq", got.dq, plain.dq, exact.dq);
  check("dk_ctx", got.dk_ctx, plain.dk_ctx, exact.dk_ctx);
  check("dv_ctx", got.dv_ctx, plain.dv_ctx, exact.dv_ctx);
  check("dk_blk", got.dk_blk, plain.dk_blk, exact.dk_blk);
  check("dv_blk", got.dv_blk, plain.dv_blk, exact.dv_blk);
}

// Every draw of the reference (one per visible (head, row, key), each with its kept bit) is drawn
// by the forward program and by the dq program exactly once, and every context-key draw once
// more by the dkv program: nothing else, nothing twice, the same bits.
TEST_P(AttentionProgram, DropoutDrawsAreTheReferenceDrawsBitwise) {
  const AttentionCase& c = GetParam();
  const AttentionData data(c);
  const AttentionResults<double> exact = reference_attention<double>(c, data);
  AttentionProgramTrace trace;
  program_attention<float>(c, data, kAttentionThreads, false, &trace);
  auto sorted = [](std::vector<DropoutDrawRecord> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto keys = static_cast<std::uint64_t>(c.S + c.T());
  std::vector<DropoutDrawRecord> context_draws;
  for (const DropoutDrawRecord& d : exact.backward_draws) {
    if (d.element % keys < static_cast<std::uint64_t>(c.S)) context_draws.push_back(d);
  }
  if (c.dropout == 0) {  // an inactive site draws nothing, anywhere
    EXPECT_TRUE(exact.forward_draws.empty());
    EXPECT_TRUE(trace.forward.draws.empty() && trace.dq.draws.empty() && trace.dkv.draws.empty());
    return;
  }
  ASSERT_FALSE(exact.forward_draws.empty());
  EXPECT_EQ(sorted(trace.forward.draws), sorted(exact.forward_draws));
  EXPECT_EQ(sorted(trace.dq.draws), sorted(exact.backward_draws));
  EXPECT_EQ(sorted(trace.dkv.draws), sorted(context_draws));
  const std::set<DropoutDrawRecord> unique(trace.forward.draws.begin(), trace.forward.draws.end());
  EXPECT_EQ(unique.size(), trace.forward.draws.size());
}

// Query tile (n, g) visits exactly the key tiles holding a key some row of block n sees (context
// tiles ascending, then the block tile); the dkv block of context tile t visits exactly the
// blocks n (ascending) with a row that sees a key of t. Everything else is skipped.
TEST_P(AttentionProgram, VisitsExactlyTheTilesWithVisibleKeys) {
  const AttentionCase& c = GetParam();
  const AttentionData data(c);
  AttentionProgramTrace trace;
  program_attention<float>(c, data, kAttentionThreads, false, &trace);
  const AttentionMask ref = c.reference_mask();
  const AttentionTiling tl = c.tiling();
  auto block_sees_range = [&](std::int64_t n, std::int64_t first, std::int64_t count) {
    for (std::int64_t k = 0; k < c.B; ++k) {
      const VisibleKeys v = ref.visible(n * c.B + k);
      for (std::int64_t key = first; key < first + count; ++key) {
        if (reference_sees(v, c.S, key)) return true;
      }
    }
    return false;
  };
  std::int64_t visited = 0;
  for (std::int64_t q = 0; q < tl.query_tiles(); ++q) {
    const std::int64_t n = q / c.nkv;
    std::vector<std::int64_t> expected;
    for (std::int64_t t = 0; t < tl.context_tiles(); ++t) {
      const KeyTile kt = context_key_tile(tl, t);
      if (block_sees_range(n, kt.first, kt.count)) expected.push_back(kt.first);
    }
    if (block_sees_range(n, c.S + n * c.B, c.B)) expected.push_back(c.S + n * c.B);
    EXPECT_EQ(trace.forward.visited[static_cast<std::size_t>(q)], expected) << "forward query tile " << q;
    EXPECT_EQ(trace.dq.visited[static_cast<std::size_t>(q)], expected) << "dq query tile " << q;
    visited += static_cast<std::int64_t>(expected.size());
  }
  for (std::int64_t b = 0; b < tl.context_tiles() * c.nkv; ++b) {
    const KeyTile kt = context_key_tile(tl, b / c.nkv);
    std::vector<std::int64_t> expected;
    for (std::int64_t n = 0; n < c.N; ++n) {
      if (block_sees_range(n, kt.first, kt.count)) expected.push_back(n);
    }
    EXPECT_EQ(trace.dkv.visited[static_cast<std::size_t>(b)], expected) << "dkv block " << b;
  }
  // A dense mask computes every (query tile, key tile) pair: context tiles and all N block tiles.
  const std::int64_t dense = tl.query_tiles() * (tl.context_tiles() + c.N);
  std::printf("  key tiles visited %lld of %lld dense\n", static_cast<long long>(visited),
              static_cast<long long>(dense));
  EXPECT_LT(visited, dense);
}

// Each output element is one thread's fixed-order sum, so the bits cannot depend on how many
// threads share a phase or in which order they run (a phase with a cross-thread dependence, or
// a read of shared memory no phase wrote, would show here).
TEST_P(AttentionProgram, BitsIndependentOfThreadPartitionAndOrder) {
  const AttentionCase& c = GetParam();
  const AttentionData data(c);
  const AttentionResults<float> base = program_attention<float>(c, data, kAttentionThreads, false);
  for (const auto& [threads, reverse] :
       {std::pair{kAttentionThreads, true}, std::pair{1, false}, std::pair{37, true}}) {
    const AttentionResults<float> other = program_attention<float>(c, data, threads, reverse);
    for (const auto& [a, b] :
         {std::pair{&base.out, &other.out}, std::pair{&base.lse, &other.lse}, std::pair{&base.dq, &other.dq},
          std::pair{&base.dk_ctx, &other.dk_ctx}, std::pair{&base.dv_ctx, &other.dv_ctx},
          std::pair{&base.dk_blk, &other.dk_blk}, std::pair{&base.dv_blk, &other.dv_blk}}) {
      ASSERT_EQ(a->size(), b->size());
      for (std::size_t e = 0; e < a->size(); ++e) {
        ASSERT_TRUE(same_bits((*a)[e], (*b)[e])) << threads << " threads, reverse " << reverse << ", element " << e;
      }
    }
  }
}

}  // namespace
}  // namespace dflash
