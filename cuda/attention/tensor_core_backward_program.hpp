// DFlash attention backward (SPEC §3, dropout site 1 of §6) on tensor cores, as two warp programs
// (cuda/README.md, "Warp programs") with the decomposition of the CUDA-core backward
// (cuda/attention/simt_program.hpp) and everything it guarantees: the same grids, the same key tiles
// and query tiles visited in the same order, the same mask decisions and Philox draws (only for
// visible elements), every gradient element written once after a fixed-order sum, no atomics,
// the same outputs (AttentionGradients, delta included). They differ in how they multiply:
//
//   dq   one block per query tile (n, g). Warp w owns rows [16 w, 16 w + 16) of the tile (zero
//        rows pad it to a multiple of 16); its Q and dO A fragments come from shared memory.
//        Per key tile (zero keys pad it to a multiple of 16; padding is hidden, never drawn):
//          S = Q K^T, dP = dO V^T        mma, fp32 accumulate, in registers
//          f P, dS                       per element from S, dP, lse, delta and the dropout
//                                        factor (score_gradient_weights, the CUDA-core formula)
//          dQ += dS K                    dS rounded to bf16 straight from its registers as the A
//                                        operand, K from shared memory as B; dQ in registers
//        and for the block's own keys (seen by this query tile only) f P and dS go to shared
//        memory as bf16 and dK = dS^T Q, dV = (fP)^T dO are computed once (key_gradients).
//   dkv  one block per (context key tile, kv head g), the same warps over the rows of each query
//        tile that sees the key tile, visited in ascending n: S, dP, f P and dS as above, f P and
//        dS to shared memory as bf16, then dK += dS^T Q and dV += (fP)^T dO into fp32
//        accumulators in shared memory (key_gradients).
// key_gradients deals its 16-key x 8-dim output tiles to the warps round robin; each tile is one
// warp's chain of mmas over the query rows, 16 at a time, ascending: a fixed order.
//
// f P and dS are rounded to bf16 once, where they become matrix-product operands; everything else
// is fp32 as in the CUDA-core program. The plain computation SPEC §10 holds these programs to is
// therefore the CUDA-core program with AttentionProblem::round_product_operands_to_bf16 set.
//
// Restricted to bf16 storage and the shapes attention_tensor_core_problem accepts (the same
// register capacity as the forward); the caller selects with attention_backward_uses_tensor_cores.
#pragma once

#include <cstdint>

#include "cuda/attention/tensor_core_program.hpp"
#include "cuda/exec/shared_access_observer.hpp"

namespace dflash {

// The selection rule of the backward: the forward's (same fragments, same register capacity).
template <class Storage>
bool attention_backward_uses_tensor_cores(const AttentionTiling& tl) {
  return attention_forward_uses_tensor_cores<Storage>(tl);
}

// Which backward kernels a caller asks for, as AttentionForwardKernel.
enum class AttentionBackwardKernel { cuda_cores, tensor_cores_where_supported };

// The drafter step's switch (CudaBackend::attention_backward_kernel): the tensor-core backward
// where it supports the shape. Its whole program runs in the CPU tests with the mma emulated
// (tests/cuda/attention/test_attention_tensor_core_backward.cpp, test_trunk_tensor_core_cpu.cpp); the instruction
// itself is checked on a device alone (tests/cuda/attention/test_attention_gpu.cpp, TensorCoreBackward*).
inline constexpr AttentionBackwardKernel kDrafterStepAttentionBackward =
    AttentionBackwardKernel::tensor_cores_where_supported;

// One lane's registers (rows "half 0 / half 1": groupID and groupID + 8, as in the forward).
// Q and dO are not held: their A fragments are loaded from shared memory once per 16 head dims of
// each product (rows_times_key_rows), which leaves the registers to S, dP and dQ.
struct AttentionTcBackwardRegisters {
  float s[kTcMaxTileKeys / kMmaN][4];   // S, then f P, per 8 keys
  float dp[kTcMaxTileKeys / kMmaN][4];  // dP, then dS
  float dq[kTcMaxHeadDim / kMmaN][4];   // dQ (dq program), per 8 head dims
  std::uint32_t a[4];                   // the A fragment being multiplied
  std::uint32_t b[2];                   // the B fragment being multiplied
  float acc[4];                         // one output tile of key_gradients
  float lse[2], delta[2];
};

struct AttentionTcBackwardShared {
  std::int64_t ld;       // row stride of q, d_out, k and v: tc_shared_row_stride(d)
  std::int64_t ld_keys;  // row stride of fp and ds: tc_shared_row_stride(keys rounded up to 16)
  std::int64_t ld_acc;   // row stride of dk and dv: tc_accumulator_row_stride(d)
  Bf16Bits* q;           // [R rounded up to 16, d]; rows >= R zero
  Bf16Bits* d_out;       // same
  Bf16Bits* k;           // [keys rounded up to 16, d]; rows past the tile's count zero
  Bf16Bits* v;
  Bf16Bits* fp;  // f P [R rounded up to 16, keys rounded up to 16], bf16
  Bf16Bits* ds;  // dS, same
  float* lse;    // [R rounded up to 16]; 0 on padding rows
  float* delta;
  float* dk;  // dkv program: fp32 accumulators [keys rounded up to 16, d], rows ld_acc apart; dq: none
  float* dv;

  DFLASH_HD AttentionTcBackwardShared(SharedCarver& mem, const AttentionTiling& tl, bool accumulators)
      : ld(tc_shared_row_stride(tl.d)),
        ld_keys(tc_shared_row_stride(tc_tile_keys(tl))),
        ld_acc(tc_accumulator_row_stride(tl.d)),
        q(mem.take<Bf16Bits>(tc_query_rows(tl) * ld)),
        d_out(mem.take<Bf16Bits>(tc_query_rows(tl) * ld)),
        k(mem.take<Bf16Bits>(tc_tile_keys(tl) * ld)),
        v(mem.take<Bf16Bits>(tc_tile_keys(tl) * ld)),
        fp(mem.take<Bf16Bits>(tc_query_rows(tl) * ld_keys)),
        ds(mem.take<Bf16Bits>(tc_query_rows(tl) * ld_keys)),
        lse(mem.take<float>(tc_query_rows(tl))),
        delta(mem.take<float>(tc_query_rows(tl))),
        dk(mem.take<float>(accumulators ? tc_tile_keys(tl) * ld_acc : 0)),
        dv(mem.take<float>(accumulators ? tc_tile_keys(tl) * ld_acc : 0)) {}

  // The accumulator element of (key, col) in dk or dv: every access of the dkv program goes here.
  DFLASH_HD std::int64_t accumulator_index(std::int64_t key, std::int64_t col) const { return key * ld_acc + col; }
};

DFLASH_HD inline std::size_t attention_dq_tc_shared_bytes(const AttentionTiling& tl) {
  return shared_layout_bytes<AttentionTcBackwardShared>(tl, false);
}
DFLASH_HD inline std::size_t attention_dkv_tc_shared_bytes(const AttentionTiling& tl) {
  return shared_layout_bytes<AttentionTcBackwardShared>(tl, true);
}

namespace attention_tc_backward_detail {

using attention_tc_detail::TileContext;
using Regs = AttentionTcBackwardRegisters;

// Phase body: the query rows and dO rows of tile (n, g) to shared memory, zero rows padding them.
inline DFLASH_HD void load_query_tile(const AttentionTiling& tl, const AttentionOperands<Bf16Bits>& in, std::int64_t n,
                                      std::int64_t g, const AttentionTcBackwardShared& sm, int t, int threads) {
  attention_program_detail::load_query_rows(tl, in.q, n, g, sm.q, sm.ld, t, threads);
  attention_program_detail::load_query_rows(tl, in.d_out, n, g, sm.d_out, sm.ld, t, threads);
  attention_tc_detail::zero_tile_rows(sm.q, tl.query_rows(), tc_query_rows(tl), tl.d, sm.ld, t, threads);
  attention_tc_detail::zero_tile_rows(sm.d_out, tl.query_rows(), tc_query_rows(tl), tl.d, sm.ld, t, threads);
  for (std::int64_t r = tl.query_rows() + t; r < tc_query_rows(tl); r += threads) {
    sm.lse[r] = 0.0f;
    sm.delta[r] = 0.0f;
  }
}

// Phase body: key tile kt (kv head g) to shared memory, zero keys padding it.
inline DFLASH_HD void load_key_tile(const AttentionTiling& tl, const AttentionOperands<Bf16Bits>& in, std::int64_t g,
                                    const KeyTile& kt, const AttentionTcBackwardShared& sm, int t, int threads) {
  attention_program_detail::load_key_tile(tl, in, g, kt, sm.k, sm.v, sm.ld, t, threads);
  attention_tc_detail::zero_tile_rows(sm.k, kt.count, tc_tile_keys(tl), tl.d, sm.ld, t, threads);
  attention_tc_detail::zero_tile_rows(sm.v, kt.count, tc_tile_keys(tl), tl.d, sm.ld, t, threads);
}

// Warp step: the lse and delta of each lane's two rows.
template <class Warp>
DFLASH_HD void load_lane_row_stats(Warp& warp, const AttentionTcBackwardShared& sm, std::int64_t row0) {
  warp.lanes([&](int lane, Regs& r) {
    for (int half = 0; half < 2; ++half) {
      const std::int64_t row = row0 + mma_group(lane) + half * 8;
      r.lse[half] = DFLASH_SHARED(sm.lse[row]);
      r.delta[half] = DFLASH_SHARED(sm.delta[row]);
    }
  });
}

// Warp step: S = Q K^T and dP = dO V^T, then f P (in s) and dS (in dp) of every element of the
// warp's rows; 0 where hidden. With `to_shared`, both also go to shared memory as bf16.
template <class Exec, class Warp>
DFLASH_HD void tile_gradient_weights(Exec& exec, Warp& warp, const TileContext& tc, const AttentionTcBackwardShared& sm,
                                     bool to_shared) {
  const AttentionTiling& tl = tc.pb.tiling;
  const std::int64_t d = tl.d, ld = sm.ld, stride = sm.ld_keys;
  const auto a_fragment = [](Regs& r, int) { return r.a; };
  attention_tc_detail::rows_times_key_rows(
      warp, tc, sm.k, ld,
      [&](int lane, Regs& r, int kd) { load_a_fragment(sm.q + tc.row0 * ld + kd * kMmaK, ld, lane, r.a); }, a_fragment,
      [](Regs& r, int nt) { return r.s[nt]; });
  attention_tc_detail::rows_times_key_rows(
      warp, tc, sm.v, ld,
      [&](int lane, Regs& r, int kd) { load_a_fragment(sm.d_out + tc.row0 * ld + kd * kMmaK, ld, lane, r.a); },
      a_fragment, [](Regs& r, int nt) { return r.dp[nt]; });
  const float sqrt_d = sqrtf(static_cast<float>(d));
  warp.lanes([&](int lane, Regs& r) {
    DFLASH_UNROLL
    for (int nt = 0; nt < kTcMaxTileKeys / kMmaN; ++nt) {
      if (nt >= 2 * tc.key_chunks) break;
      for (int i = 0; i < kMmaCElements; ++i) {
        const FragmentCoord at = mma_c_coord(lane, i);
        const std::int64_t row = tc.row0 + at.row, c = nt * kMmaN + at.col;
        float fp = 0.0f, ds = 0.0f;
        if (tc.visible(row, c)) {
          const std::uint64_t element = attention_dropout_element(
              tl.row_head(tc.g, row), tc.n * tl.B + tl.row_token(row), tc.kt.first + c, tl.S, tl.T());
          const float f = tc.pb.dropout.factor(element);
          if (tc.pb.dropout.active) exec.drew(element, f);  // only a live site draws
          attention_program_detail::score_gradient_weights(r.s[nt][i], r.dp[nt][i], f, r.lse[i >> 1], r.delta[i >> 1],
                                                           sqrt_d, fp, ds);
        }
        r.s[nt][i] = fp;
        r.dp[nt][i] = ds;
        if (to_shared) {
          DFLASH_SHARED(sm.fp[row * stride + c]) = bf16_bits_from_float(fp);
          DFLASH_SHARED(sm.ds[row * stride + c]) = bf16_bits_from_float(ds);
        }
      }
    }
  });
}

// Warp step: dQ += dS K, dS's bf16 A fragment straight from its registers, K from shared memory.
template <class Warp>
DFLASH_HD void tile_query_gradient(Warp& warp, const TileContext& tc, const Bf16Bits* k, std::int64_t ld, int head_n8) {
  attention_tc_detail::weights_times_key_rows(
      warp, tc, k, ld, head_n8, [](Regs& r, int nt) { return r.dp[nt]; }, [](Regs& r) { return r.a; },
      [](Regs& r, int c) { return r.dq[c]; });
}

// Warp step: dK = dS^T Q and dV = (fP)^T dO of the tile's keys from the bf16 f P and dS in shared
// memory. Output tiles (gradient: 0 dK, 1 dV; 16 keys; 8 head dims) are dealt to the warps round
// robin; each is start(gradient, key, col) plus a chain of mmas over the query rows, 16 at a
// time, ascending, handed to finish(gradient, key, col, value) for keys of the tile.
template <class Warp, class Start, class Finish>
DFLASH_HD void key_gradients(Warp& warp, int warps, const TileContext& tc, const AttentionTcBackwardShared& sm,
                             Start&& start, Finish&& finish) {
  const AttentionTiling& tl = tc.pb.tiling;
  const std::int64_t d = tl.d, ld = sm.ld, stride = sm.ld_keys;
  const int head_n8 = static_cast<int>(d / kMmaN), row_chunks = static_cast<int>(tc_query_rows(tl) / kMmaM);
  const int tiles = 2 * tc.key_chunks * head_n8;
  for (int tile = warp.index(); tile < tiles; tile += warps) {
    const int gradient = tile / (tc.key_chunks * head_n8), kc = tile / head_n8 % tc.key_chunks, c = tile % head_n8;
    const Bf16Bits* weights = gradient == 0 ? sm.ds : sm.fp;
    const Bf16Bits* rows = gradient == 0 ? sm.q : sm.d_out;
    warp.lanes([&](int lane, Regs& r) {
      for (int i = 0; i < kMmaCElements; ++i) {
        const FragmentCoord at = mma_c_coord(lane, i);
        r.acc[i] = start(gradient, kc * kMmaK + at.row, c * kMmaN + at.col);
      }
    });
    for (int rc = 0; rc < row_chunks; ++rc) {
      warp.lanes([&](int lane, Regs& r) {
        load_a_fragment_transposed(weights + rc * kMmaM * stride + kc * kMmaK, stride, lane, r.a);
        load_b_fragment_from_rows(rows + rc * kMmaM * ld + c * kMmaN, ld, lane, r.b);
      });
      warp.mma([&](Regs& r) { return MmaOperands{r.a, r.b, r.acc}; });
    }
    warp.lanes([&](int lane, Regs& r) {
      for (int i = 0; i < kMmaCElements; ++i) {
        const FragmentCoord at = mma_c_coord(lane, i);
        const std::int64_t key = kc * kMmaK + at.row;
        if (key < tc.kt.count) finish(gradient, key, c * kMmaN + at.col, r.acc[i]);
      }
    });
  }
}

}  // namespace attention_tc_backward_detail

// Grid: query_tiles() blocks of tc_forward_threads() threads (16 query rows per warp).
template <class Exec>
DFLASH_HD void attention_dq_tc_block(Exec& exec, const AttentionProblem& pb, const AttentionOperands<Bf16Bits>& in,
                                     const AttentionGradients& grads, unsigned char* shared, std::int64_t query_tile) {
  using namespace attention_program_detail;
  using namespace attention_tc_backward_detail;
  const AttentionTiling& tl = pb.tiling;
  SharedCarver mem(shared);
  const AttentionTcBackwardShared sm(mem, tl, false);
  const std::int64_t n = query_tile / tl.nkv, g = query_tile % tl.nkv;
  const std::int64_t d = tl.d;
  const int threads = exec.threads(), warps = threads / kWarpLanes;
  const int head_chunks = static_cast<int>(d / kMmaK), head_n8 = static_cast<int>(d / kMmaN);
  auto regs = exec.template lane_registers<Regs>();

  exec.phase([&](int t) {
    load_query_tile(tl, in, n, g, sm, t, threads);
    begin_query_tile_backward(pb, in, grads, n, g, sm.lse, sm.delta, t, threads);
  });
  exec.warp_phase(regs, [&](auto& warp) {
    load_lane_row_stats(warp, sm, warp.index() * kMmaM);
    warp.lanes([&](int, Regs& r) {
      DFLASH_UNROLL
      for (int c = 0; c < kTcMaxHeadDim / kMmaN; ++c) {
        if (c >= head_n8) break;
        for (int i = 0; i < kMmaCElements; ++i) r.dq[c][i] = 0.0f;
      }
    });
  });
  const std::int64_t steps = query_tile_steps(tl, pb.mask, n);
  for (std::int64_t step = 0; step < steps; ++step) {
    const KeyTile kt = query_tile_step(tl, pb.mask, n, step);
    exec.visit(kt.first);
    exec.phase([&](int t) { load_key_tile(tl, in, g, kt, sm, t, threads); });
    const int key_chunks = static_cast<int>((kt.count + kMmaK - 1) / kMmaK);
    exec.warp_phase(regs, [&](auto& warp) {
      const TileContext tc{pb, n, g, warp.index() * kMmaM, kt, key_chunks, head_chunks};
      tile_gradient_weights(exec, warp, tc, sm, kt.is_block);
      tile_query_gradient(warp, tc, sm.k, sm.ld, head_n8);
    });
    if (!kt.is_block) continue;
    exec.warp_phase(regs, [&](auto& warp) {  // this query tile is the only one that sees these keys
      const TileContext tc{pb, n, g, 0, kt, key_chunks, head_chunks};
      key_gradients(
          warp, warps, tc, sm, [](int, std::int64_t, std::int64_t) { return 0.0f; },
          [&](int gradient, std::int64_t key, std::int64_t col, float value) {
            const std::int64_t at = head_offset(kt.first - tl.S + key, tl.nkv, g, d) + col;
            (gradient == 0 ? grads.dk_blk : grads.dv_blk)[at] = value;
          });
    });
  }
  exec.warp_phase(regs, [&](auto& warp) {
    const std::int64_t row0 = warp.index() * kMmaM;
    warp.lanes([&](int lane, Regs& r) {
      attention_tc_detail::for_each_row_element(tl, n, g, row0, lane, head_n8,
                                                [&](int c, int i, std::int64_t at) { grads.dq[at] = r.dq[c][i]; });
    });
  });
}

// Grid: context_tiles() x nkv blocks of tc_forward_threads() threads; block b handles context
// tile b / nkv for kv head b % nkv. Reads grads.delta written by the dq program (launched first).
template <class Exec>
DFLASH_HD void attention_dkv_tc_block(Exec& exec, const AttentionProblem& pb, const AttentionOperands<Bf16Bits>& in,
                                      const AttentionGradients& grads, unsigned char* shared, std::int64_t block) {
  using namespace attention_program_detail;
  using namespace attention_tc_backward_detail;
  const AttentionTiling& tl = pb.tiling;
  SharedCarver mem(shared);
  const AttentionTcBackwardShared sm(mem, tl, true);
  const std::int64_t tile = block / tl.nkv, g = block % tl.nkv;
  const KeyTile kt = context_key_tile(tl, tile);
  const std::int64_t d = tl.d;
  const int threads = exec.threads(), warps = threads / kWarpLanes;
  const int head_chunks = static_cast<int>(d / kMmaK);
  const int key_chunks = static_cast<int>((kt.count + kMmaK - 1) / kMmaK);
  auto regs = exec.template lane_registers<Regs>();

  exec.phase([&](int t) {
    load_key_tile(tl, in, g, kt, sm, t, threads);
    for (std::int64_t e = t; e < tc_tile_keys(tl) * sm.ld_acc; e += threads) {
      sm.dk[e] = 0.0f;
      sm.dv[e] = 0.0f;
    }
  });
  for (std::int64_t n = 0; n < tl.N; ++n) {  // ascending n: the fixed reduction order
    if (!context_tiles_of_block(tl, pb.mask, n).contains(tile)) continue;
    exec.visit(n);  // bookkeeping: the query block visited
    exec.phase([&](int t) {
      load_query_tile(tl, in, n, g, sm, t, threads);
      load_row_stats(tl, in.lse, grads.delta, n, g, sm.lse, sm.delta, t, threads);
    });
    exec.warp_phase(regs, [&](auto& warp) {
      const TileContext tc{pb, n, g, warp.index() * kMmaM, kt, key_chunks, head_chunks};
      load_lane_row_stats(warp, sm, tc.row0);
      tile_gradient_weights(exec, warp, tc, sm, true);
    });
    exec.warp_phase(regs, [&](auto& warp) {
      const TileContext tc{pb, n, g, 0, kt, key_chunks, head_chunks};
      key_gradients(
          warp, warps, tc, sm,
          [&](int gradient, std::int64_t key, std::int64_t col) {
            return DFLASH_SHARED((gradient == 0 ? sm.dk : sm.dv)[sm.accumulator_index(key, col)]);
          },
          [&](int gradient, std::int64_t key, std::int64_t col, float value) {
            DFLASH_SHARED((gradient == 0 ? sm.dk : sm.dv)[sm.accumulator_index(key, col)]) = value;
          });
    });
  }
  exec.phase([&](int t) { store_context_key_grads(tl, grads, kt, g, sm.dk, sm.dv, sm.ld_acc, t, threads); });
}

}  // namespace dflash
