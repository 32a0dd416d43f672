// One DFlash attention problem (shapes, anchors, keep flags, layer type, dropout), its inputs in
// double (each value a float, so the fp32 programs and the double reference see the same
// inputs), the double and the plain fp32 reference results, and the CUDA block programs run over
// their real grids on the host (harness/cuda/host_block_exec.hpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>

#include <gtest/gtest.h>
#include <ostream>
#include <string>
#include <vector>

#include "common/attention_tiles.hpp"
#include "cuda/attention/simt_program.hpp"
#include "harness/cuda/host_block_exec.hpp"
#include "reference/attention.hpp"
#include "reference/compare.hpp"
#include "reference/counter_rng.hpp"

namespace dflash {

struct AttentionCase {
  std::string name;
  std::int64_t S, N, B, nh, nkv, d;
  bool sliding;
  std::int64_t window;
  std::int64_t key_tile;
  double dropout;
  std::vector<std::int64_t> anchors;
  std::vector<std::uint8_t> keep;

  std::int64_t T() const { return N * B; }
  DrafterDims dims() const {
    DrafterDims m;
    m.S = S;
    m.N = N;
    m.B = B;
    m.T = T();
    m.nh = nh;
    m.nkv = nkv;
    m.d = d;
    return m;
  }
  AttentionMask reference_mask() const {
    return AttentionMask{B, anchors, keep, sliding ? LayerType::sliding_attention : LayerType::full_attention, window};
  }
  AttentionMaskView mask_view() const { return AttentionMaskView{anchors.data(), keep.data(), S, B, sliding, window}; }
  AttentionTiling tiling() const { return AttentionTiling{S, N, B, nh, nkv, d, key_tile}; }
};

// Holds one tensor to SPEC §10: error <= 2 x the plain low-precision computation's error + floor,
// errors norm-wise against the double reference (reference/compare.hpp). Prints the numbers.
inline void expect_within_rule(const char* name, const std::vector<float>& got, const std::vector<float>& plain,
                               const std::vector<double>& exact, double floor) {
  const double error = relative_error(std::span(got), std::span(exact));
  const double plain_error = relative_error(std::span(plain), std::span(exact));
  const double bound = 2 * plain_error + floor;
  EXPECT_LE(error, bound) << name << ": error " << error << ", plain " << plain_error;
  std::printf("  %-7s error %.2e  plain %.2e  bound %.2e\n", name, error, plain_error, bound);
}

// Anchors hit the edges: a_0 = 0 (no context key), blocks with kappa = 0, an anchor at S - 2, an
// anchor on a tile boundary (tiny: 12 = 3 KT), and sliding windows whose first key is the last key
// of a tile (tiny: 12 - 5 = 7, KT 4; mid: 286 - 255 = 31, KT 32), so that a window one key short
// skips a whole tile. tiny_block_over_tile has a block tile (B 8) larger than a context tile (KT 4):
// shared key rows sized by the context tile alone overrun.
inline std::vector<AttentionCase> attention_cases() {
  return {
      {"tiny_sliding", 20, 4, 4, 4, 2, 4, true, 6, 4, 0.0, {0, 5, 12, 18}, {1, 1, 0, 1}},
      {"tiny_sliding_window_edge", 20, 4, 4, 4, 2, 4, true, 6, 4, 0.2, {0, 5, 12, 18}, {1, 1, 1, 1}},
      {"tiny_full_dropout", 20, 4, 4, 4, 2, 4, false, 6, 4, 0.3, {0, 5, 11, 18}, {1, 1, 0, 1}},
      {"tiny_sliding_dropout", 20, 4, 4, 4, 2, 4, true, 6, 8, 0.5, {2, 3, 9, 17}, {1, 1, 1, 1}},
      {"tiny_block_over_tile", 20, 3, 8, 4, 2, 4, true, 6, 4, 0.2, {1, 9, 18}, {1, 1, 1}},
      {"mid_sliding", 300, 5, 16, 8, 2, 32, true, 256, 32, 0.0, {3, 40, 150, 286, 298}, {1, 1, 1, 1, 0}},
      {"mid_full_dropout", 300, 5, 16, 8, 2, 32, false, 256, 32, 0.1, {3, 40, 150, 270, 298}, {1, 1, 1, 0, 1}},
      {"d128_sliding_dropout", 80, 3, 8, 4, 1, 128, true, 40, 32, 0.25, {1, 37, 78}, {1, 1, 1}},
      {"d128_full", 80, 3, 8, 4, 1, 128, false, 40, 32, 0.0, {1, 37, 78}, {1, 0, 1}},
  };
}

inline void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

// The dropout coordinates every case uses (any fixed values would do; a sequence index and layer
// other than 0 make a wrong stream show).
inline constexpr std::uint64_t kCaseSeed = 0x5EED0A77E17ull;
inline constexpr std::uint32_t kCaseStep = 7, kCaseSequence = 3, kCaseLayer = 2;

inline AttentionProblem attention_problem(const AttentionCase& c) {
  return AttentionProblem{
      c.tiling(), c.mask_view(),
      dropout_site_view(kCaseSeed, kCaseStep, kCaseSequence, kCaseLayer, DropoutSite::attention_probs, c.dropout)};
}

struct AttentionData {
  std::vector<double> q, k_ctx, v_ctx, k_blk, v_blk, d_out;  // float-representable

  explicit AttentionData(const AttentionCase& c) {
    CounterRng rng(0xA77E + static_cast<std::uint64_t>(c.S * 131 + c.d));
    auto fill = [&](std::vector<double>& x, std::int64_t n) {
      x.resize(static_cast<std::size_t>(n));
      for (double& v : x) v = static_cast<double>(static_cast<float>(rng.uniform(-2.0, 2.0)));
    };
    fill(q, c.T() * c.nh * c.d);
    fill(k_ctx, c.S * c.nkv * c.d);
    fill(v_ctx, c.S * c.nkv * c.d);
    fill(k_blk, c.T() * c.nkv * c.d);
    fill(v_blk, c.T() * c.nkv * c.d);
    fill(d_out, c.T() * c.nh * c.d);
  }
};

// Attention results in one precision: O, lse, and the five gradients.
template <class Real>
struct AttentionResults {
  std::vector<Real> out, lse, dq, dk_ctx, dv_ctx, dk_blk, dv_blk;
  std::vector<Real> delta;  // dO . O per (row, head): the host programs' only (the reference has none)
  std::vector<DropoutDrawRecord> forward_draws, backward_draws;
};

// The reference (reference/attention.hpp) in Real on the case's inputs.
template <class Real>
AttentionResults<Real> reference_attention(const AttentionCase& c, const AttentionData& data) {
  MemoryTracker tracker;
  const DrafterDims dims = c.dims();
  auto cast = [](const std::vector<double>& x) { return std::vector<Real>(x.begin(), x.end()); };
  const std::vector<Real> q = cast(data.q), kc = cast(data.k_ctx), vc = cast(data.v_ctx), kb = cast(data.k_blk),
                          vb = cast(data.v_blk), dout = cast(data.d_out);
  const AttentionInputs<Real> in{q.data(), kc.data(), vc.data(), kb.data(), vb.data()};
  AttentionResults<Real> r;
  r.out.assign(q.size(), Real(0));
  r.lse.assign(static_cast<std::size_t>(c.T() * c.nh), Real(0));
  r.dq.assign(q.size(), Real(0));
  r.dk_ctx.assign(kc.size(), Real(0));
  r.dv_ctx.assign(kc.size(), Real(0));
  r.dk_blk.assign(kb.size(), Real(0));
  r.dv_blk.assign(kb.size(), Real(0));
  std::vector<DropoutDrawRecord>* sink = &r.forward_draws;
  const DropoutObserver observer = [&](const DropoutDraw& draw) { sink->push_back({draw.element, draw.kept}); };
  DropoutCoordinates at{kCaseSeed, kCaseStep, kCaseSequence, DropoutPass::forward, &observer};
  const DropoutSiteMask<Real> forward_mask(at, kCaseLayer, DropoutSite::attention_probs, c.dropout);
  dflash_attention_forward(tracker, dims, c.reference_mask(), in, forward_mask, r.lse.data(), r.out.data());
  sink = &r.backward_draws;
  at.pass = DropoutPass::backward;
  const DropoutSiteMask<Real> backward_mask(at, kCaseLayer, DropoutSite::attention_probs, c.dropout);
  const AttentionGrads<Real> grads{r.dq.data(), r.dk_ctx.data(), r.dv_ctx.data(), r.dk_blk.data(), r.dv_blk.data()};
  dflash_attention_backward(tracker, dims, c.reference_mask(), in, backward_mask, r.lse.data(), dout.data(), grads);
  return r;
}

// Float-representable inputs in Storage: float, or bf16 bits rounded to nearest even.
template <class Storage>
std::vector<Storage> in_storage(const std::vector<double>& x) {
  std::vector<Storage> out(x.size());
  for (std::size_t e = 0; e < x.size(); ++e) narrow_into(static_cast<float>(x[e]), out[e]);
  return out;
}

// What the host runs of the three programs recorded besides the values.
struct AttentionProgramTrace {
  HostGridRun forward, dq, dkv;
};

// The three block programs over their real grids on the host, `threads` threads per block (the
// kernels' kAttentionThreads unless a test varies it). Storage float (the fp32 programs) or bf16
// bits (inputs rounded to bf16 on the way in, O widened back; statistics and gradients are fp32).
// `round_product_operands` sets AttentionProblem::round_product_operands_to_bf16 (the plain
// computation of the tensor-core backward).
template <class Storage>
AttentionResults<float> program_attention(const AttentionCase& c, const AttentionData& data, int threads, bool reverse,
                                          AttentionProgramTrace* trace = nullptr, bool round_product_operands = false) {
  const auto cast = in_storage<Storage>;
  const std::vector<Storage> q = cast(data.q), kc = cast(data.k_ctx), vc = cast(data.v_ctx), kb = cast(data.k_blk),
                             vb = cast(data.v_blk), dout = cast(data.d_out);
  AttentionProblem pb = attention_problem(c);
  pb.round_product_operands_to_bf16 = round_product_operands;
  const AttentionTiling tl = pb.tiling;
  AttentionResults<float> r;
  std::vector<Storage> out(q.size());
  for (Storage& o : out) narrow_into(-1.0f, o);  // every element must be written: start from a wrong value
  r.lse.assign(static_cast<std::size_t>(c.T() * c.nh), -1.0f);
  r.dq.assign(q.size(), -1.0f);
  r.dk_ctx.assign(kc.size(), -1.0f);
  r.dv_ctx.assign(kc.size(), -1.0f);
  r.dk_blk.assign(kb.size(), -1.0f);
  r.dv_blk.assign(kb.size(), -1.0f);
  std::vector<float> delta(r.lse.size(), -1.0f);

  AttentionOperands<Storage> in{q.data(), kc.data(), vc.data(), kb.data(), vb.data(), nullptr, nullptr, nullptr};
  const AttentionForwardOutputs<Storage> fwd{out.data(), r.lse.data()};
  HostGridRun forward = run_grid_on_host(tl.query_tiles(), attention_forward_shared_bytes<Storage>(tl), threads,
                                         reverse, [&](HostBlockExec& exec, unsigned char* shared, std::int64_t b) {
                                           attention_forward_block(exec, pb, in, fwd, shared, b);
                                         });
  in.out = out.data();
  in.d_out = dout.data();
  in.lse = r.lse.data();
  const AttentionGradients grads{r.dq.data(),     r.dk_ctx.data(), r.dv_ctx.data(),
                                 r.dk_blk.data(), r.dv_blk.data(), delta.data()};
  HostGridRun dq = run_grid_on_host(tl.query_tiles(), attention_dq_shared_bytes<Storage>(tl), threads, reverse,
                                    [&](HostBlockExec& exec, unsigned char* shared, std::int64_t b) {
                                      attention_dq_block(exec, pb, in, grads, shared, b);
                                    });
  HostGridRun dkv = run_grid_on_host(tl.context_tiles() * tl.nkv, attention_dkv_shared_bytes<Storage>(tl), threads,
                                     reverse, [&](HostBlockExec& exec, unsigned char* shared, std::int64_t b) {
                                       attention_dkv_block(exec, pb, in, grads, shared, b);
                                     });
  for (const Storage& o : out) r.out.push_back(widen(o));
  r.delta = delta;
  r.forward_draws = forward.draws;
  r.backward_draws = dq.draws;
  r.backward_draws.insert(r.backward_draws.end(), dkv.draws.begin(), dkv.draws.end());
  if (trace != nullptr) *trace = AttentionProgramTrace{std::move(forward), std::move(dq), std::move(dkv)};
  return r;
}

}  // namespace dflash
