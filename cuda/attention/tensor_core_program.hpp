// DFlash attention forward (SPEC §3, dropout site 1 of §6) on tensor cores, FlashAttention-2
// style, as a warp program (cuda/README.md, "Warp programs") that the CUDA kernel runs on the GPU
// (cuda/exec/warp_device.cuh) and the CPU tests run on the host with an emulated mma
// (harness/cuda/host_warp_exec.hpp). A drop-in alternative to attention_forward_block
// (cuda/attention/simt_program.hpp): the same grid (one block per query tile (n, g)), the same key
// tiles in the same order (common/attention_tiles.hpp), the same per-element mask and Philox
// dropout coordinate, the same outputs (O in bf16, lse in fp32). It differs in how it multiplies:
//
//   warp w owns rows [16 w, 16 w + 16) of the query tile (padded with zero rows to a multiple of
//   16); its Q rows live in registers as A fragments for the whole block. Per key tile (padded
//   with zero keys to a multiple of 16; padding is hidden, never drawn):
//     S = Q K^T       mma m16n8k16 per 8 keys x 16 head dims, fp32 accumulate, S in registers
//     online softmax  on the S fragments: each lane's row max / row sum over its own elements,
//                     then across its quad (exchange with lane masks 1, 2: the quad holds the row)
//     O = O a + P V   P = f exp(s - m) rounded to bf16, taken straight from the S registers as
//                     the A operand (cuda/exec/mma_fragments.hpp), V tile from shared memory as B
//   O and lse are written once, after the last tile. No atomics, every sum in a fixed order:
//   bitwise reproducible run to run.
// The row sum l is the fp32 sum of exp(s - m) (before dropout and before the bf16 rounding of P),
// as in the CUDA-core program; the bf16 rounding of P costs at most 2^-9 relative per term of O,
// the same order as the rounding of O itself.
//
// Restricted to bf16 storage and the shapes attention_tensor_core_problem accepts; the caller
// selects with attention_forward_uses_tensor_cores (cuda/attention/kernels.hpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/attention/simt_program.hpp"
#include "cuda/exec/mma_fragments.hpp"
#include "cuda/runtime/bf16_bits.hpp"

namespace dflash {

// Compile-time register capacity of one lane (the device keeps the fragments in registers):
// head dims, keys per tile (context key_tile or block size B, rounded up to 16), warps per block
// (query tile rows nh/nkv B, rounded up to 16, over 16). Full scale: d 128, 32 keys, 4 x 32 rows.
inline constexpr std::int64_t kTcMaxHeadDim = 128;
inline constexpr std::int64_t kTcMaxTileKeys = 64;
inline constexpr std::int64_t kTcMaxWarps = 8;

DFLASH_HD inline std::int64_t round_up_to(std::int64_t x, std::int64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}
DFLASH_HD inline std::int64_t tc_query_rows(const AttentionTiling& tl) { return round_up_to(tl.query_rows(), kMmaM); }
DFLASH_HD inline std::int64_t tc_tile_keys(const AttentionTiling& tl) { return round_up_to(tl.max_tile_keys(), kMmaK); }
// The row stride, in elements, of every bf16 tile the tensor-core programs keep in shared memory
// ([rows, width], width a multiple of 16: d for Q, dO, K and V, the tile's keys for f P and dS):
// width + 8, i.e. 4 mod 8 words. Every fragment load (cuda/exec/mma_fragments.hpp) has a warp's
// 8 lane groups read 8 rows at one column, the 4 lanes of a group 4 neighbouring words (or, for B
// from rows and A transposed, 4 rows 2 apart at one word). With rows `width` apart (a multiple of
// 32 words at d 64 and 128) the 8 rows share their banks: 8-way conflicts (4-way for the row
// pairs). 4 mod 8 words puts the rows in distinct groups of 4 banks: every fragment load and the
// f P and dS stores are conflict-free (tests/cuda/attention/test_attention_tc_banks.cpp).
DFLASH_HD inline std::int64_t tc_shared_row_stride(std::int64_t width) { return width + 8; }
// The row stride, in floats, of the dkv program's fp32 dK and dV accumulators ([keys, d] each in
// shared memory): d + 4. key_gradients (tensor_core_backward_program.hpp) reads and writes them in
// C fragment order, one float per lane per element: the 8 lane groups at 8 keys, the 4 lanes of a
// group at 4 columns 2 apart. With rows d apart (a multiple of 32 words at d 64 and 128) the 8 keys
// share 4 banks: 8-way. At d + 4 (4 or 20 mod 32 words) the keys' rows start in distinct groups of
// 4 banks and only rows 1 apart with columns 4 apart meet: 2-way, the least any stride gives a
// warp-wide access of one float per lane in this order (the lanes of one element reach one parity
// of bank when the stride is even; tests/cuda/attention/test_attention_tc_banks.cpp tries every
// stride).
DFLASH_HD inline std::int64_t tc_accumulator_row_stride(std::int64_t d) { return d + 4; }

DFLASH_HD inline int tc_forward_threads(const AttentionTiling& tl) {
  return static_cast<int>(tc_query_rows(tl) / kMmaM) * kWarpLanes;
}

// Why the tensor-core forward cannot run this tiling (the field and the limit), or nullptr.
inline const char* attention_tensor_core_problem(const AttentionTiling& tl) {
  if (const char* problem = attention_tiling_problem(tl)) return problem;
  if (tl.d % kMmaK != 0) return "d (head dim) must be a multiple of 16 for tensor cores";
  if (tl.d > kTcMaxHeadDim) return "d (head dim) must be <= 128 for tensor cores";
  if (tc_tile_keys(tl) > kTcMaxTileKeys) return "key_tile and B (block size) must be <= 64 for tensor cores";
  if (tc_query_rows(tl) > kTcMaxWarps * kMmaM) return "nh/nkv x B (query tile rows) must be <= 128 for tensor cores";
  return nullptr;
}

// The selection rule: tensor cores for bf16 storage on the shapes above, the CUDA-core program
// (cuda/attention/simt_program.hpp) for everything else.
template <class Storage>
bool attention_forward_uses_tensor_cores(const AttentionTiling& tl) {
  return std::is_same_v<Storage, Bf16Bits> && attention_tensor_core_problem(tl) == nullptr;
}

// Which forward kernel a caller asks for: tensor_cores_where_supported runs the tensor-core
// kernel where attention_forward_uses_tensor_cores<Storage> holds and the CUDA-core kernel
// elsewhere (same outputs, within the fp32 rule of each other).
enum class AttentionForwardKernel { cuda_cores, tensor_cores_where_supported };

// The drafter step's switch (CudaBackend::attention_forward_kernel): the tensor-core forward where
// it supports the shape. Its whole program runs in the CPU tests with the mma emulated
// (tests/cuda/attention/test_attention_tensor_core_program.cpp, test_trunk_tensor_core_cpu.cpp); only the
// instruction itself (the inline PTX and its operand registers) is checked on a device alone
// (tests/cuda/attention/test_attention_gpu.cpp, TensorCore*). AttentionForwardKernel::cuda_cores here
// switches the step back to the CUDA-core forward.
inline constexpr AttentionForwardKernel kDrafterStepAttentionForward =
    AttentionForwardKernel::tensor_cores_where_supported;

// One lane's registers. Rows "half 0 / half 1" are the lane's two rows of the warp's 16:
// groupID and groupID + 8 (C elements 0, 1 and 2, 3).
struct AttentionTcForwardRegisters {
  std::uint32_t q[kTcMaxHeadDim / kMmaK][4];  // Q as A fragments, per 16 head dims
  float s[kTcMaxTileKeys / kMmaN][4];         // S, then f P (fp32), per 8 keys
  float o[kTcMaxHeadDim / kMmaN][4];          // unnormalised O, per 8 head dims
  std::uint32_t b[2];                         // the B fragment being multiplied
  std::uint32_t p[4];                         // P of 16 keys as an A fragment (bf16)
  float row_max[2], row_sum[2];               // running m and l
  float tile_max[2], tile_sum[2], rescale[2];
};

struct AttentionTcForwardShared {
  std::int64_t ld;  // row stride of q, k and v: tc_shared_row_stride(d)
  Bf16Bits* q;      // [R rounded up to 16, d]; rows >= R zero
  Bf16Bits* k;      // [keys rounded up to 16, d]; rows past the tile's count zero
  Bf16Bits* v;

  DFLASH_HD AttentionTcForwardShared(SharedCarver& mem, const AttentionTiling& tl)
      : ld(tc_shared_row_stride(tl.d)),
        q(mem.take<Bf16Bits>(tc_query_rows(tl) * ld)),
        k(mem.take<Bf16Bits>(tc_tile_keys(tl) * ld)),
        v(mem.take<Bf16Bits>(tc_tile_keys(tl) * ld)) {}
};

DFLASH_HD inline std::size_t attention_forward_tc_shared_bytes(const AttentionTiling& tl) {
  return shared_layout_bytes<AttentionTcForwardShared>(tl);
}

namespace attention_tc_detail {

using Regs = AttentionTcForwardRegisters;

// Zero rows [first, last) of a [rows, width] tile with row stride ld (the padding rows a tile is
// rounded up to 16 with); the columns past width are never read.
template <class T>
DFLASH_HD void zero_tile_rows(T* tile, std::int64_t first, std::int64_t last, std::int64_t width, std::int64_t ld,
                              int thread, int threads) {
  for (std::int64_t e = thread; e < (last - first) * width; e += threads)
    tile[(first + e / width) * ld + e % width] = 0;
}

// The query tile (n, g), the current key tile and where the warp's rows start: what the warp
// steps of one key tile need.
struct TileContext {
  const AttentionProblem& pb;
  std::int64_t n, g, row0;
  KeyTile kt;
  int key_chunks;   // 16-key chunks holding the tile's keys
  int head_chunks;  // d / 16

  // Query row r (of the tile) sees key column c of the key tile.
  DFLASH_HD bool visible(std::int64_t r, std::int64_t c) const {
    const AttentionTiling& tl = pb.tiling;
    return r < tl.query_rows() && c < kt.count && pb.mask.visible(n, tl.row_token(r), kt.first + c);
  }
};

// C = A B^T for the warp's 16 rows and the tile's keys: A the rows' A fragments per 16 head dims
// (a_of(registers, kd), after load_a(lane, registers, kd) has put it there, or already there), B^T
// the key rows of `tile` ([keys, d] row-major, in shared memory). The C fragments per 8 keys
// c_of(registers, nt) are zeroed, then each is summed over d / 16 mmas, head dims ascending (one A
// fragment serves every 8 keys). S = Q K^T (forward and backward) and dP = dO V^T (backward).
template <class Warp, class LoadA, class AOf, class COf>
DFLASH_HD void rows_times_key_rows(Warp& warp, const TileContext& tc, const Bf16Bits* tile, std::int64_t ld,
                                   LoadA load_a, AOf a_of, COf c_of) {
  warp.lanes([&](int, auto& r) {
    DFLASH_UNROLL
    for (int nt = 0; nt < kTcMaxTileKeys / kMmaN; ++nt) {
      if (nt >= 2 * tc.key_chunks) break;
      for (int i = 0; i < kMmaCElements; ++i) c_of(r, nt)[i] = 0.0f;
    }
  });
  DFLASH_UNROLL
  for (int kd = 0; kd < kTcMaxHeadDim / kMmaK; ++kd) {
    if (kd >= tc.head_chunks) break;
    warp.lanes([&](int lane, auto& r) { load_a(lane, r, kd); });
    DFLASH_UNROLL
    for (int nt = 0; nt < kTcMaxTileKeys / kMmaN; ++nt) {
      if (nt >= 2 * tc.key_chunks) break;
      warp.lanes(
          [&](int lane, auto& r) { load_b_fragment_from_columns(tile + nt * kMmaN * ld + kd * kMmaK, ld, lane, r.b); });
      warp.mma([&](auto& r) { return MmaOperands{a_of(r, kd), r.b, c_of(r, nt)}; });
    }
  }
}

// S = Q K^T for the tile, Q's A fragments held in registers for the whole block.
template <class Warp>
DFLASH_HD void tile_scores(Warp& warp, const TileContext& tc, const Bf16Bits* k, std::int64_t ld) {
  rows_times_key_rows(
      warp, tc, k, ld, [](int, Regs&, int) {}, [](Regs& r, int kd) { return r.q[kd]; },
      [](Regs& r, int nt) { return r.s[nt]; });
}

// The online softmax of the tile on the S fragments: scale and mask, the new row max (across the
// quad), f exp(s - m) with the dropout factor of each visible element, the row sum (across the
// quad), and O rescaled by exp(m_old - m_new).
template <class Exec, class Warp>
DFLASH_HD void tile_softmax(Exec& exec, Warp& warp, const TileContext& tc, int head_n8) {
  using attention_program_detail::negative_infinity;
  const AttentionTiling& tl = tc.pb.tiling;
  const float sqrt_d = sqrtf(static_cast<float>(tl.d));
  warp.lanes([&](int lane, Regs& r) {  // scores; -inf where hidden; the lane's row maxima
    r.tile_max[0] = r.tile_max[1] = negative_infinity();
    DFLASH_UNROLL
    for (int nt = 0; nt < kTcMaxTileKeys / kMmaN; ++nt) {
      if (nt >= 2 * tc.key_chunks) break;
      for (int i = 0; i < kMmaCElements; ++i) {
        const FragmentCoord at = mma_c_coord(lane, i);
        const float s = tc.visible(tc.row0 + at.row, nt * kMmaN + at.col) ? r.s[nt][i] / sqrt_d : negative_infinity();
        r.s[nt][i] = s;
        r.tile_max[i >> 1] = s > r.tile_max[i >> 1] ? s : r.tile_max[i >> 1];
      }
    }
  });
  for (int mask = 1; mask <= 2; mask *= 2) {  // the quad's four lanes hold the row
    for (int half = 0; half < 2; ++half) {
      warp.exchange(
          mask, [&](Regs& r) { return r.tile_max[half]; },
          [&](Regs& r, float other) { r.tile_max[half] = other > r.tile_max[half] ? other : r.tile_max[half]; });
    }
  }
  warp.lanes([&](int lane, Regs& r) {  // f exp(s - m_new), the lane's partial row sums, O rescaled
    float m_new[2];
    for (int half = 0; half < 2; ++half) {
      const float m_old = r.row_max[half];
      m_new[half] = r.tile_max[half] > m_old ? r.tile_max[half] : m_old;
      // Nothing visible yet: nothing changes. Otherwise exp(m_old - m_new), 0 when m_old = -inf.
      r.rescale[half] = m_new[half] == negative_infinity() ? 1.0f : exp_of(m_old - m_new[half]);
      r.tile_sum[half] = 0.0f;
    }
    DFLASH_UNROLL
    for (int nt = 0; nt < kTcMaxTileKeys / kMmaN; ++nt) {
      if (nt >= 2 * tc.key_chunks) break;
      for (int i = 0; i < kMmaCElements; ++i) {
        if (r.s[nt][i] == negative_infinity()) {
          r.s[nt][i] = 0.0f;
          continue;
        }
        const FragmentCoord at = mma_c_coord(lane, i);
        const std::int64_t row = tc.row0 + at.row;
        const float e = exp_of(r.s[nt][i] - m_new[i >> 1]);
        r.tile_sum[i >> 1] += e;
        const std::uint64_t element = attention_dropout_element(tl.row_head(tc.g, row), tc.n * tl.B + tl.row_token(row),
                                                                tc.kt.first + nt * kMmaN + at.col, tl.S, tl.T());
        const float f = tc.pb.dropout.factor(element);
        if (tc.pb.dropout.active) exec.drew(element, f);  // only a live site draws
        r.s[nt][i] = e * f;
      }
    }
    for (int half = 0; half < 2; ++half) r.row_max[half] = m_new[half];
    DFLASH_UNROLL
    for (int c = 0; c < kTcMaxHeadDim / kMmaN; ++c) {
      if (c >= head_n8) break;
      for (int i = 0; i < kMmaCElements; ++i) r.o[c][i] *= r.rescale[i >> 1];
    }
  });
  for (int mask = 1; mask <= 2; mask *= 2) {
    for (int half = 0; half < 2; ++half) {
      warp.exchange(
          mask, [&](Regs& r) { return r.tile_sum[half]; }, [&](Regs& r, float other) { r.tile_sum[half] += other; });
    }
  }
  warp.lanes([&](int, Regs& r) {
    for (int half = 0; half < 2; ++half) r.row_sum[half] = r.row_sum[half] * r.rescale[half] + r.tile_sum[half];
  });
}

// C += W B for the warp's 16 rows: W the tile's weights held in fp32 C fragments per 8 keys
// (w_of(registers, nt)), per 16 keys (ascending) rounded to bf16 into the A fragment
// a_of(registers); B the key rows of `tile` ([keys, d] row-major, in shared memory); per 8 head
// dims one mma into c_of(registers, c). O += P V (forward) and dQ += dS K (backward).
template <class Warp, class WOf, class AOf, class COf>
DFLASH_HD void weights_times_key_rows(Warp& warp, const TileContext& tc, const Bf16Bits* tile, std::int64_t ld,
                                      int head_n8, WOf w_of, AOf a_of, COf c_of) {
  DFLASH_UNROLL
  for (int kc = 0; kc < kTcMaxTileKeys / kMmaK; ++kc) {
    if (kc >= tc.key_chunks) break;
    warp.lanes([&](int, auto& r) { accumulators_to_a_fragment(w_of(r, 2 * kc), w_of(r, 2 * kc + 1), a_of(r)); });
    DFLASH_UNROLL
    for (int c = 0; c < kTcMaxHeadDim / kMmaN; ++c) {
      if (c >= head_n8) break;
      warp.lanes(
          [&](int lane, auto& r) { load_b_fragment_from_rows(tile + kc * kMmaK * ld + c * kMmaN, ld, lane, r.b); });
      warp.mma([&](auto& r) { return MmaOperands{a_of(r), r.b, c_of(r, c)}; });
    }
  }
}

// O += P V: P's bf16 A fragment straight from the S registers, the V tile from shared memory.
template <class Warp>
DFLASH_HD void tile_values(Warp& warp, const TileContext& tc, const Bf16Bits* v, std::int64_t ld, int head_n8) {
  weights_times_key_rows(
      warp, tc, v, ld, head_n8, [](Regs& r, int nt) { return r.s[nt]; }, [](Regs& r) { return r.p; },
      [](Regs& r, int c) { return r.o[c]; });
}

// The lane's elements of the warp's [16 rows, d] accumulator array (C fragments per 8 head dims,
// rows row0 + ...) that belong to real rows of query tile (n, g): f(c, i, offset of the element in
// a [T, nh d] tensor) for fragment c, element i. How O and dQ leave the registers.
template <class F>
DFLASH_HD void for_each_row_element(const AttentionTiling& tl, std::int64_t n, std::int64_t g, std::int64_t row0,
                                    int lane, int head_n8, F&& f) {
  DFLASH_UNROLL
  for (int c = 0; c < kTcMaxHeadDim / kMmaN; ++c) {
    if (c >= head_n8) break;
    for (int i = 0; i < kMmaCElements; ++i) {
      const FragmentCoord at = mma_c_coord(lane, i);
      const std::int64_t row = row0 + at.row;
      if (row >= tl.query_rows()) continue;
      const std::int64_t to =
          attention_program_detail::head_offset(n * tl.B + tl.row_token(row), tl.nh, tl.row_head(g, row), tl.d);
      f(c, i, to + c * kMmaN + at.col);
    }
  }
}

}  // namespace attention_tc_detail

// Grid: query_tiles() blocks of tc_forward_threads() threads (16 query rows per warp).
template <class Exec>
DFLASH_HD void attention_forward_tc_block(Exec& exec, const AttentionProblem& pb, const AttentionOperands<Bf16Bits>& in,
                                          const AttentionForwardOutputs<Bf16Bits>& out, unsigned char* shared,
                                          std::int64_t query_tile) {
  using namespace attention_program_detail;
  using attention_tc_detail::Regs;
  const AttentionTiling& tl = pb.tiling;
  SharedCarver mem(shared);
  const AttentionTcForwardShared sm(mem, tl);
  const std::int64_t n = query_tile / tl.nkv, g = query_tile % tl.nkv;
  const std::int64_t R = tl.query_rows(), d = tl.d;
  const int threads = exec.threads();
  const int head_chunks = static_cast<int>(d / kMmaK), head_n8 = static_cast<int>(d / kMmaN);
  auto regs = exec.template lane_registers<Regs>();

  exec.phase([&](int t) {
    load_query_rows(tl, in.q, n, g, sm.q, sm.ld, t, threads);
    attention_tc_detail::zero_tile_rows(sm.q, R, tc_query_rows(tl), d, sm.ld, t, threads);
  });
  exec.warp_phase(regs, [&](auto& warp) {
    const std::int64_t row0 = warp.index() * kMmaM;
    warp.lanes([&](int lane, Regs& r) {
      DFLASH_UNROLL
      for (int kd = 0; kd < kTcMaxHeadDim / kMmaK; ++kd) {
        if (kd >= head_chunks) break;
        load_a_fragment(sm.q + row0 * sm.ld + kd * kMmaK, sm.ld, lane, r.q[kd]);
      }
      DFLASH_UNROLL
      for (int c = 0; c < kTcMaxHeadDim / kMmaN; ++c) {
        if (c >= head_n8) break;
        for (int i = 0; i < kMmaCElements; ++i) r.o[c][i] = 0.0f;
      }
      for (int half = 0; half < 2; ++half) {
        r.row_max[half] = negative_infinity();
        r.row_sum[half] = 0.0f;
      }
    });
  });
  const std::int64_t steps = query_tile_steps(tl, pb.mask, n);
  for (std::int64_t step = 0; step < steps; ++step) {
    const KeyTile kt = query_tile_step(tl, pb.mask, n, step);
    exec.visit(kt.first);
    exec.phase([&](int t) {
      load_key_tile(tl, in, g, kt, sm.k, sm.v, sm.ld, t, threads);
      attention_tc_detail::zero_tile_rows(sm.k, kt.count, tc_tile_keys(tl), d, sm.ld, t, threads);
      attention_tc_detail::zero_tile_rows(sm.v, kt.count, tc_tile_keys(tl), d, sm.ld, t, threads);
    });
    exec.warp_phase(regs, [&](auto& warp) {
      const attention_tc_detail::TileContext tc{
          pb, n, g, warp.index() * kMmaM, kt, static_cast<int>((kt.count + kMmaK - 1) / kMmaK), head_chunks};
      attention_tc_detail::tile_scores(warp, tc, sm.k, sm.ld);
      attention_tc_detail::tile_softmax(exec, warp, tc, head_n8);
      attention_tc_detail::tile_values(warp, tc, sm.v, sm.ld, head_n8);
    });
  }
  exec.warp_phase(regs, [&](auto& warp) {
    const std::int64_t row0 = warp.index() * kMmaM;
    warp.lanes([&](int lane, Regs& r) {
      attention_tc_detail::for_each_row_element(tl, n, g, row0, lane, head_n8, [&](int c, int i, std::int64_t at) {
        const float l = r.row_sum[i >> 1];
        narrow_into(l > 0.0f ? r.o[c][i] / l : 0.0f, out.out[at]);
      });
      if (mma_lane_in_quad(lane) != 0) return;  // the quad's first lane writes its two rows' lse
      for (int half = 0; half < 2; ++half) {
        const std::int64_t row = row0 + mma_group(lane) + half * 8;
        if (row >= R) continue;
        const float l = r.row_sum[half];
        out.lse[(n * tl.B + tl.row_token(row)) * tl.nh + tl.row_head(g, row)] =
            l > 0.0f ? r.row_max[half] + log_of(l) : 0.0f;
      }
    });
  });
}

}  // namespace dflash
