// One DFlash attention problem (shapes, anchors, keep flags, layer type, dropout), its inputs in
// double (each value a float, so the fp32 programs and the double reference see the same
// inputs), the double and the plain fp32 reference results, and the CUDA block programs run over
// their real grids on the host (tests/cuda/host_block_exec.hpp).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/attention_tiles.hpp"
#include "cuda/attention_program.hpp"
#include "reference/attention.hpp"
#include "reference/counter_rng.hpp"
#include "tests/cuda/host_block_exec.hpp"

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

inline void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

// The dropout coordinates every case uses (any fixed values would do; a sequence index and layer
// other than 0 make a wrong stream show).
inline constexpr std::uint64_t kCaseSeed = 0x5EED0A77E17ull;
inline constexpr std::uint32_t kCaseStep = 7, kCaseSequence = 3, kCaseLayer = 2;

inline AttentionProblem attention_problem(const AttentionCase& c) {
  return AttentionProblem{c.tiling(), c.mask_view(),
                          attention_dropout_view(kCaseSeed, kCaseStep, kCaseSequence, kCaseLayer, c.dropout)};
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

// What the host runs of the three programs recorded besides the values.
struct AttentionProgramTrace {
  HostGridRun forward, dq, dkv;
};

// The three block programs over their real grids on the host, fp32 storage, `threads` threads
// per block (the kernels' kAttentionThreads unless a test varies it).
inline AttentionResults<float> program_attention(const AttentionCase& c, const AttentionData& data, int threads,
                                                 bool reverse, AttentionProgramTrace* trace = nullptr) {
  auto cast = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  const std::vector<float> q = cast(data.q), kc = cast(data.k_ctx), vc = cast(data.v_ctx), kb = cast(data.k_blk),
                           vb = cast(data.v_blk), dout = cast(data.d_out);
  const AttentionProblem pb = attention_problem(c);
  const AttentionTiling tl = pb.tiling;
  AttentionResults<float> r;
  r.out.assign(q.size(), -1.0f);  // every element must be written: start from a wrong value
  r.lse.assign(static_cast<std::size_t>(c.T() * c.nh), -1.0f);
  r.dq.assign(q.size(), -1.0f);
  r.dk_ctx.assign(kc.size(), -1.0f);
  r.dv_ctx.assign(kc.size(), -1.0f);
  r.dk_blk.assign(kb.size(), -1.0f);
  r.dv_blk.assign(kb.size(), -1.0f);
  std::vector<float> delta(r.lse.size(), -1.0f);

  AttentionOperands<float> in{q.data(), kc.data(), vc.data(), kb.data(), vb.data(), nullptr, nullptr, nullptr};
  const AttentionForwardOutputs<float> fwd{r.out.data(), r.lse.data()};
  HostGridRun forward = run_grid_on_host(tl.query_tiles(), attention_forward_shared_bytes<float>(tl), threads, reverse,
                                         [&](HostBlockExec& exec, unsigned char* shared, std::int64_t b) {
                                           attention_forward_block(exec, pb, in, fwd, shared, b);
                                         });
  in.out = r.out.data();
  in.d_out = dout.data();
  in.lse = r.lse.data();
  const AttentionGradients grads{r.dq.data(),     r.dk_ctx.data(), r.dv_ctx.data(),
                                 r.dk_blk.data(), r.dv_blk.data(), delta.data()};
  HostGridRun dq = run_grid_on_host(tl.query_tiles(), attention_dq_shared_bytes<float>(tl), threads, reverse,
                                    [&](HostBlockExec& exec, unsigned char* shared, std::int64_t b) {
                                      attention_dq_block(exec, pb, in, grads, shared, b);
                                    });
  HostGridRun dkv = run_grid_on_host(tl.context_tiles() * tl.nkv, attention_dkv_shared_bytes<float>(tl), threads,
                                     reverse, [&](HostBlockExec& exec, unsigned char* shared, std::int64_t b) {
                                       attention_dkv_block(exec, pb, in, grads, shared, b);
                                     });
  r.forward_draws = forward.draws;
  r.backward_draws = dq.draws;
  r.backward_draws.insert(r.backward_draws.end(), dkv.draws.begin(), dkv.draws.end());
  if (trace != nullptr) *trace = AttentionProgramTrace{std::move(forward), std::move(dq), std::move(dkv)};
  return r;
}

}  // namespace dflash
