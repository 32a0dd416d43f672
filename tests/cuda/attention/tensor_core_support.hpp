// The tensor-core attention forward (cuda/attention/tensor_core_program.hpp) run on the host with the
// emulated mma (harness/cuda/host_warp_exec.hpp), on the attention cases it supports, and what its
// CPU and GPU tests compare it with.
#pragma once

#include <string>
#include <vector>

#include "cuda/attention/tensor_core_backward_program.hpp"
#include "cuda/attention/tensor_core_program.hpp"
#include "harness/cuda/host_warp_exec.hpp"
#include "tests/cuda/attention/simt_support.hpp"

namespace dflash {

// The CPU tests' attention cases (tests/cuda/attention/simt_support.hpp) with a head dim the
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
  // Shapes where the tile's three sizes part ways, each sized by its own rule (tc_tile_keys,
  // tc_query_rows): a block wider than the context key tile (32 keys per tile from B, not 16 from
  // key_tile), one query head per kv head (16 query rows against 32 tile keys), and query rows
  // that fill their last warp only half (24 rows: warp 1's rows 8..15 are padding).
  cases.push_back({"block_wider_than_key_tile", 40, 3, 32, 2, 1, 16, true, 24, 8, 0.2, {3, 21, 39}, {1, 1, 1}});
  cases.push_back({"key_tile_over_query_rows", 70, 3, 16, 2, 2, 32, false, 32, 32, 0.1, {5, 33, 69}, {1, 0, 1}});
  cases.push_back({"query_rows_half_a_warp_over", 50, 3, 8, 6, 2, 16, true, 20, 16, 0.3, {4, 26, 49}, {1, 1, 1}});
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
  HostGridRun grid =
      run_grid_on_host<HostWarpExec>(tl.query_tiles(), attention_forward_tc_shared_bytes(tl), tc_forward_threads(tl),
                                     reverse, [&](HostWarpExec& exec, unsigned char* shared, std::int64_t b) {
                                       attention_forward_tc_block(exec, pb, in, fwd, shared, b);
                                     });
  for (const Bf16Bits& o : out) r.out.push_back(widen(o));
  r.forward_draws = grid.draws;
  if (run != nullptr) *run = std::move(grid);
  return r;
}

// The tensor-core backward (dq, then dkv) over its real grids on the host, on the O and lse of
// `forward` (a forward's results on the same case and data): `forward` with the five gradients,
// delta and the backward draws; `trace` gets what the dq and dkv grids visited and drew.
inline AttentionResults<float> tensor_core_backward(const AttentionCase& c, const AttentionData& data,
                                                    AttentionResults<float> r, bool reverse,
                                                    AttentionProgramTrace* trace = nullptr) {
  const auto cast = in_storage<Bf16Bits>;
  const std::vector<Bf16Bits> q = cast(data.q), kc = cast(data.k_ctx), vc = cast(data.v_ctx), kb = cast(data.k_blk),
                              vb = cast(data.v_blk), dout = cast(data.d_out);
  std::vector<Bf16Bits> out(r.out.size());
  for (std::size_t e = 0; e < out.size(); ++e) narrow_into(r.out[e], out[e]);  // exact: O came from bf16
  const AttentionProblem pb = attention_problem(c);
  const AttentionTiling tl = pb.tiling;
  r.dq.assign(q.size(), -1.0f);  // every element must be written: start from a wrong value
  r.dk_ctx.assign(kc.size(), -1.0f);
  r.dv_ctx.assign(kc.size(), -1.0f);
  r.dk_blk.assign(kb.size(), -1.0f);
  r.dv_blk.assign(kb.size(), -1.0f);
  r.delta.assign(r.lse.size(), -1.0f);
  const AttentionOperands<Bf16Bits> in{q.data(),  kc.data(),  vc.data(),   kb.data(),
                                       vb.data(), out.data(), dout.data(), r.lse.data()};
  const AttentionGradients grads{r.dq.data(),     r.dk_ctx.data(), r.dv_ctx.data(),
                                 r.dk_blk.data(), r.dv_blk.data(), r.delta.data()};
  HostGridRun dq =
      run_grid_on_host<HostWarpExec>(tl.query_tiles(), attention_dq_tc_shared_bytes(tl), tc_forward_threads(tl),
                                     reverse, [&](HostWarpExec& exec, unsigned char* shared, std::int64_t b) {
                                       attention_dq_tc_block(exec, pb, in, grads, shared, b);
                                     });
  HostGridRun dkv = run_grid_on_host<HostWarpExec>(tl.context_tiles() * tl.nkv, attention_dkv_tc_shared_bytes(tl),
                                                   tc_forward_threads(tl), reverse,
                                                   [&](HostWarpExec& exec, unsigned char* shared, std::int64_t b) {
                                                     attention_dkv_tc_block(exec, pb, in, grads, shared, b);
                                                   });
  r.backward_draws = dq.draws;
  r.backward_draws.insert(r.backward_draws.end(), dkv.draws.begin(), dkv.draws.end());
  if (trace != nullptr) *trace = AttentionProgramTrace{HostGridRun{}, std::move(dq), std::move(dkv)};
  return r;
}

// delta = dO . O per (row, head) in double from the reference's O: what the programs' delta
// approximates.
inline std::vector<double> reference_delta(const AttentionCase& c, const AttentionData& data,
                                           const AttentionResults<double>& exact) {
  std::vector<double> delta(static_cast<std::size_t>(c.T() * c.nh), 0.0);
  for (std::size_t rh = 0; rh < delta.size(); ++rh) {
    for (std::int64_t col = 0; col < c.d; ++col) {
      const std::size_t at = rh * static_cast<std::size_t>(c.d) + static_cast<std::size_t>(col);
      delta[rh] += data.d_out[at] * exact.out[at];
    }
  }
  return delta;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t e = 0; e < a.size(); ++e) {
    if (!same_bits(a[e], b[e])) return false;
  }
  return true;
}

}  // namespace dflash
