// The tensor-core attention forward (cuda/attention_tc_program.hpp) run on the host with the
// emulated mma (harness/cuda/host_warp_exec.hpp), on the attention cases it supports, and what its
// CPU and GPU tests compare it with.
#pragma once

#include <string>
#include <vector>

#include "cuda/attention_tc_program.hpp"
#include "tests/cuda/attention_program_support.hpp"
#include "harness/cuda/host_warp_exec.hpp"

namespace dflash {

// The CPU tests' attention cases (tests/cuda/attention_program_support.hpp) with a head dim the
// tensor cores take (the tiny cases' d = 4 becomes 16), and one with the full-scale query tile
// (4 heads x B 32 = 128 rows: 8 warps) and head dim 128.
inline std::vector<AttentionCase> tensor_core_cases() {
  std::vector<AttentionCase> cases;
  for (AttentionCase c : attention_cases()) {
    if (c.d % kMmaK != 0) {
      c.d = kMmaK;
      c.name += "_d16";
    }
    cases.push_back(c);
  }
  cases.push_back({"full_scale_tile_sliding_dropout", 96, 2, 32, 4, 1, 128, true, 48, 32, 0.1, {40, 95}, {1, 1}});
  return cases;
}

// The case's inputs rounded to bf16: exact maths on exactly what bf16 storage holds.
inline AttentionData bf16_rounded(AttentionData data) {
  for (std::vector<double>* x : {&data.q, &data.k_ctx, &data.v_ctx, &data.k_blk, &data.v_blk, &data.d_out}) {
    for (double& v : *x) v = round_to_bf16(static_cast<float>(v));
  }
  return data;
}

// The tensor-core forward over its real grid on the host (inputs rounded to bf16 on the way in, O
// widened back): out, lse and the forward draws; `run` gets the visited tiles and draws.
inline AttentionResults<float> tensor_core_forward(const AttentionCase& c, const AttentionData& data, bool reverse,
                                                   HostGridRun* run = nullptr) {
  const auto cast = in_storage<Bf16Bits>;
  const std::vector<Bf16Bits> q = cast(data.q), kc = cast(data.k_ctx), vc = cast(data.v_ctx), kb = cast(data.k_blk),
                              vb = cast(data.v_blk);
  const AttentionProblem pb = attention_problem(c);
  const AttentionTiling tl = pb.tiling;
  std::vector<Bf16Bits> out(q.size());
  for (Bf16Bits& o : out) narrow_into(-1.0f, o);  // every element must be written: start from a wrong value
  AttentionResults<float> r;
  r.lse.assign(static_cast<std::size_t>(c.T() * c.nh), -1.0f);
  const AttentionOperands<Bf16Bits> in{q.data(), kc.data(), vc.data(), kb.data(), vb.data(), nullptr, nullptr, nullptr};
  const AttentionForwardOutputs<Bf16Bits> fwd{out.data(), r.lse.data()};
  HostGridRun grid = run_grid_on_host<HostWarpExec>(
      tl.query_tiles(), attention_forward_tc_shared_bytes(tl), tc_forward_threads(tl), reverse,
      [&](HostWarpExec& exec, unsigned char* shared, std::int64_t b) {
        attention_forward_tc_block(exec, pb, in, fwd, shared, b);
      });
  for (const Bf16Bits& o : out) r.out.push_back(widen(o));
  r.forward_draws = grid.draws;
  if (run != nullptr) *run = std::move(grid);
  return r;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t e = 0; e < a.size(); ++e) {
    if (!same_bits(a[e], b[e])) return false;
  }
  return true;
}

}  // namespace dflash
