// What the CUDA trunk (cuda/trunk/stack.hpp over cuda/trunk/layer.hpp) allocates for
// one sequence, per category, in closed form: the one home of these counts,
// read by the planner (the trunk of a production-precision plan,
// planner/trunk_plan.hpp) and by cuda/ (TrunkLayerActivations::bytes). The CUDA
// trunk keeps a different set of tensors than the reference
// (reference/trunk_memory.hpp), in mixed formats: fp32 (4 B, `float` in the
// code) for the residual stream X, X', every gradient, the q/k projections a
// norm reads back and every row statistic; Storage (storage_bytes: bf16 = 2 on
// the GPU, 4 in the CPU twin with float storage) for GEMM and attention
// operands. Sizes below in bytes, f = 4, b = storage_bytes, qw = nh d, kw = nkv
// d.
//
// saved (MemoryCategory::saved):
//   context     fc output [S,H] f, its rstd [S] f, C [S,H] b            whole
//   step boundaries  the layer inputs X_l [T,H] f at the policy's segment
//   starts (none, per_layer: all) final       X_L [T,H] f and its rstd [T] f
//   end of forward .. first backward op A           one layer's
//   TrunkLayerActivations (cuda_layer_activation_bytes); `none` keeps every
//               layer's from forward, the others rebuild one segment's in
//               backward with the inputs of its inner layers
//   peak: none   ctx + L (TH f + A) + fin
//         else   max(ctx + #segments TH f + fin, max_j ctx + (j+1) TH f +
//         |seg_j| A + (|seg_j|-1) TH f)
// transient (MemoryCategory::transient), the trunk's own scratch phase by
// phase; dL/dY is not in it (the caller hands it over; in the step it is the
// loss head's gradient) but Y is (forward returns it as transient):
//   layer forward     [X_l unless a boundary] + [A unless `none` keeps it] +
//   o_proj output, then
//                     MLP output + layer output: 2 TH f
//   end of forward    X_L (still transient) + Y [T,H] b
//   segment recompute dL/dX + dL/dC [S,H] f + the layer forward's 2 TH f
//   layer backward    dL/dX + dL/dC + max(MLP, attention, projections)
//   (cuda_trunk_memory.cpp) context backward  dL/dC + dL/d(fc output), 2 [S,H]
//   f
// Device-only allocations (cuBLAS workspace of cuda/gemm/linear.hpp) are not in
// the plan.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "planner/checked_bytes.hpp"
#include "reference/drafter_dims.hpp"
#include "reference/trunk_policy.hpp"

namespace dflash {

inline constexpr std::int64_t kCudaTrunkFp32Bytes = 4;  // the CUDA trunk's `float` buffers

struct CudaTrunkMemory {
  std::int64_t context_bytes = 0;           // fc output, its rstd, C
  std::int64_t boundary_bytes = 0;          // one layer input X_l
  std::int64_t final_bytes = 0;             // X_L and its rstd
  std::int64_t layer_activation_bytes = 0;  // A
  std::int64_t saved_bytes = 0;             // peak of MemoryCategory::saved
  std::int64_t transient_bytes = 0;         // peak of the trunk's MemoryCategory::transient
};

namespace cuda_trunk_memory_detail {

inline std::int64_t sum(std::initializer_list<std::int64_t> terms) {
  std::int64_t s = 0;
  for (std::int64_t t : terms) s = checked_sum(s, t);
  return s;
}

inline std::int64_t fp32(std::initializer_list<std::int64_t> sizes) {
  std::int64_t n = kCudaTrunkFp32Bytes;
  for (std::int64_t s : sizes) n = checked_product({n, s});
  return n;
}

// The layer backward's scratch besides dL/dX and dL/dC, its three phases as
// trunk_layer_backward allocates them (b = Storage bytes):
//   MLP          dL/dv; dL/d(MLP output) and its b copy; dL/d act, dL/d gate,
//   dL/d up [T,I] and
//                the b copies of the last two
//   attention    dq [T,qw], dKc, dVc [S,kw], dKb, dVb [T,kw]; dL/d(o_proj
//   output) and its b copy,
//                dL/dO and its b copy, delta [T,nh]
//   projections  dq, dKc, dVc, dKb, dVb; the pre-norm dq, dKc, dKb; b copies of
//   the five
//                projection gradients; dL/du [T,H]
inline std::int64_t layer_backward_scratch(const DrafterDims& m, std::int64_t b) {
  const std::int64_t TH = checked_product({m.T, m.H}), TI = checked_product({m.T, m.I});
  const std::int64_t Tq = checked_product({m.T, m.q_width()});
  const std::int64_t Sk = checked_product({m.S, m.kv_width()}), Tk = checked_product({m.T, m.kv_width()});
  const std::int64_t mlp = sum({fp32({2, TH}), checked_product({b, TH}), fp32({3, TI}), checked_product({b, 2, TI})});
  const std::int64_t attention_inputs = sum({fp32({Tq}), fp32({2, Sk}), fp32({2, Tk})});
  const std::int64_t attention = sum({attention_inputs, fp32({TH}), checked_product({b, TH}), fp32({Tq}),
                                      checked_product({b, Tq}), fp32({m.T, m.nh})});
  const std::int64_t projections = sum({attention_inputs, fp32({Tq}), fp32({Sk}), fp32({Tk}),
                                        checked_product({b, sum({Tq, 2 * Sk, 2 * Tk})}), fp32({TH})});
  return std::max({mlp, attention, projections});
}

inline std::int64_t transient_peak(const DrafterDims& m, TrunkPolicy policy, std::int64_t segment,
                                   const CudaTrunkMemory& c, std::int64_t b) {
  const std::int64_t X = fp32({m.T, m.H}), dC = fp32({m.S, m.H});
  const std::int64_t layer_forward = 2 * X;  // MLP output + layer output (after the o_proj output's X)
  std::int64_t peak = sum({X, checked_product({b, m.T, m.H})});  // end of forward: X_L and Y
  for (std::int64_t l = 0; l < m.L; ++l) {
    const bool boundary = policy == TrunkPolicy::none || l % segment == 0;
    peak = std::max(peak,
                    sum({boundary ? 0 : X, policy == TrunkPolicy::none ? 0 : c.layer_activation_bytes, layer_forward}));
  }
  if (policy != TrunkPolicy::none) peak = std::max(peak, sum({X, dC, layer_forward}));
  peak = std::max(peak, sum({X, dC, layer_backward_scratch(m, b)}));
  return std::max(peak, 2 * dC);
}

inline std::int64_t saved_peak(const DrafterDims& m, TrunkPolicy policy, std::int64_t segment,
                               const CudaTrunkMemory& c) {
  if (policy == TrunkPolicy::none) {
    return sum(
        {c.context_bytes, checked_product({m.L, sum({c.boundary_bytes, c.layer_activation_bytes})}), c.final_bytes});
  }
  const std::int64_t segments = (m.L + segment - 1) / segment;
  std::int64_t peak = sum({c.context_bytes, checked_product({segments, c.boundary_bytes}), c.final_bytes});
  for (std::int64_t j = 0; j < segments; ++j) {
    const std::int64_t layers = std::min(segment, m.L - j * segment);
    peak = std::max(peak, sum({c.context_bytes, checked_product({j + 1, c.boundary_bytes}),
                               checked_product({layers, c.layer_activation_bytes}),
                               checked_product({layers - 1, c.boundary_bytes})}));
  }
  return peak;
}

}  // namespace cuda_trunk_memory_detail

// Bytes of one layer's TrunkLayerActivations.
inline std::int64_t cuda_layer_activation_bytes(const DrafterDims& m, std::int64_t b) {
  using namespace cuda_trunk_memory_detail;
  require_at_least(b, 1, "storage element bytes");
  const std::int64_t T = m.T, S = m.S;
  const std::int64_t statistics = fp32({sum({2 * T, checked_product({2, T, m.nh}), checked_product({S, m.nkv}),
                                             checked_product({T, m.nkv})})});  // input/post rstd, q rstd, lse, k rstd
  const std::int64_t projections =
      fp32({sum({checked_product({T, m.q_width()}), checked_product({S, m.kv_width()}),
                 checked_product({T, m.kv_width()})})});  // q/k projections, read back by their norms
  const std::int64_t x_mid = fp32({T, m.H});              // X'
  const std::int64_t operands =
      checked_product({b, sum({checked_product({2, T, m.H}), checked_product({2, T, m.q_width()}),
                               checked_product({2, S, m.kv_width()}), checked_product({2, T, m.kv_width()}),
                               checked_product({3, T, m.I})})});  // u, v; q, O; k/v rows; gate, up, act
  return sum({statistics, projections, x_mid, operands});
}

// Throws InputError naming checkpoint_every or the storage bytes when invalid.
inline CudaTrunkMemory cuda_trunk_memory(const DrafterDims& m, TrunkPolicy policy, std::int64_t checkpoint_every,
                                         std::int64_t storage_bytes) {
  using namespace cuda_trunk_memory_detail;
  const std::int64_t segment = trunk_segment_length(policy, checkpoint_every, m.L);
  CudaTrunkMemory c;
  c.layer_activation_bytes = cuda_layer_activation_bytes(m, storage_bytes);
  c.context_bytes = sum({fp32({m.S, m.H}), fp32({m.S}), checked_product({storage_bytes, m.S, m.H})});
  c.boundary_bytes = fp32({m.T, m.H});
  c.final_bytes = sum({fp32({m.T, m.H}), fp32({m.T})});
  c.saved_bytes = saved_peak(m, policy, segment, c);
  c.transient_bytes = transient_peak(m, policy, segment, c, storage_bytes);
  return c;
}

}  // namespace dflash
