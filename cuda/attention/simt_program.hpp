// DFlash attention (SPEC §3, dropout site 1 of §6) as three thread-block programs
// (cuda/exec/block_program.hpp) that the CUDA kernels run on the GPU and the CPU tests run on the host:
//
//   forward    one block per query tile (n, g): online softmax over the tile's key tiles
//              (common/attention_tiles.hpp), O and the log-sum-exp per (row, head)
//   dq         one block per query tile: recomputes P from the saved lse, accumulates dQ over the
//              key tiles; also writes dK/dV of its own block tile (those keys are seen by this
//              query tile only) and delta = dO . O per row for the dkv program
//   dkv        one block per (context key tile t, kv head g): visits, in ascending n, the query
//              tiles that see tile t, recomputes P and accumulates dK/dV in a fixed order
// Every output element is written by exactly one thread, once, after a fixed-order sum: no
// atomics, bitwise reproducible. The dropout factor of element (h, i, key) is regenerated from
// Philox in all three programs, only for visible elements (a hidden key is never drawn).
//
// The maths is the reference's (reference/attention.hpp): s = q.k / sqrt d, P = exp(s - lse),
// O = sum f P v (f: 0 or 1/(1-p)), dP = f dO.v, dS = P (dP - delta) / sqrt d with
// delta = sum P dP = dO . O, dQ = sum dS k, dK = sum dS q, dV = sum f P dO.
// Storage is float (CPU tests) or bf16 bits (GPU); arithmetic and statistics are fp32.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/attention_mask.hpp"
#include "common/attention_tiles.hpp"
#include "common/dropout_site_view.hpp"
#include "common/hd.hpp"
#include "common/row_math.hpp"
#include "common/storage.hpp"
#include "cuda/exec/block_program.hpp"
#include "cuda/exec/shared_access_observer.hpp"

namespace dflash {

// Threads per block of all three programs (any count gives the same bits: each output element
// is one thread's fixed-order sum; the CPU tests check this).
inline constexpr int kAttentionThreads = 128;

// Row stride, in Storage elements, of the programs' [rows, d] tiles in shared memory (the query,
// dO, key and value rows): d rounded up to whole 4-byte words, plus one word when that count is
// even, so that a row spans an odd number of words. Shared memory has 32 banks of 4-byte words
// (bank = word mod 32); the score loops give the lanes of a warp different query rows (and, where
// a tile has fewer than 32 query rows, two or more key rows) at the same column, and rows an odd
// number of words apart fall in 32 different banks. Unpadded, d = 128 rows are 64 words (bf16) or
// 128 words (fp32) apart: every lane in the same bank, a 32-way conflict. Only addresses change,
// not the arithmetic: the results are bitwise those of the unpadded layout.
template <class Storage>
DFLASH_HD std::int64_t attention_shared_row_stride(std::int64_t d) {
  static_assert(sizeof(Storage) == 2 || sizeof(Storage) == 4, "Storage is fp32 or bf16 bits");
  constexpr std::int64_t per_word = 4 / static_cast<std::int64_t>(sizeof(Storage));
  std::int64_t words = (d + per_word - 1) / per_word;
  if (words % 2 == 0) ++words;
  return words * per_word;
}

// The designed bank-conflict degree of every warp-wide access to shared memory (the most distinct
// 4-byte words one access of one warp touches in one bank; 1 = conflict-free, words shared by
// several lanes are broadcast), which tests/cuda/attention/test_attention_simt_banks.cpp measures
// on the host over each program's real partition, the fp32 score tiles, accumulators and row
// statistics included: 1 where the R query rows of a tile are a multiple of 32 or divide 32, for
// any key tile (a ragged one, key_tile 40, too), bf16 rows of any d (d >= 16 where R = 16: at d 8
// key_grads spans four keys 16 words apart, 2-way) and fp32 rows of d a multiple of 32. Two shapes the CUDA-core programs alone run wrap a warp across rows, 2-way
// (kAttentionRowWrapBankWays): fp32 rows of other d (d 40: the tile loads' lanes reach from a
// row's tail into the next row's head, rows an odd 41 words apart), and other R (48, 144: the
// score lanes wrap from row R - 1 to row 0, rows r and r + 32 meeting in one bank).
inline constexpr int kAttentionSharedBankWays = 1;
inline constexpr int kAttentionRowWrapBankWays = 2;

// Row stride of the key-major score tiles (the forward's P, the backward's f P and dS): R, plus one
// where R is a multiple of 32. key_grads gives the lanes of a warp two keys at one row where d is
// not a multiple of 32 (d 40: keys c and c + 1), and rows R words apart would meet in one bank.
DFLASH_HD inline std::int64_t score_stride(std::int64_t query_rows) {
  return query_rows % 32 == 0 ? query_rows + 1 : query_rows;
}

// Where the score of query row r and key c of the current tile sits in the score tiles:
// key-major, [KTmax, score_stride(R)], the R rows of one key adjacent. The score loops give
// consecutive threads consecutive rows of one key (score_of_element), and the forward's softmax
// gives each thread a row of its own: both reach consecutive words. Row-major ([R, KTmax]), the
// softmax's lanes were KTmax words apart: a 32-way conflict at 32 or 64 keys a tile, 8-way at 40.
DFLASH_HD inline std::int64_t score_index(std::int64_t query_rows, std::int64_t r, std::int64_t c) {
  return c * score_stride(query_rows) + r;
}

// The (row, key) of element e of a score loop over R query rows: rows fastest, so the lanes of a
// warp share a key row (one broadcast word) and read query rows an odd number of words apart
// (attention_shared_row_stride). Every element is still one thread's fixed-order sum: the order
// of the elements changes nothing in the results.
struct ScoreElement {
  std::int64_t r, c;
};
DFLASH_HD inline ScoreElement score_of_element(std::int64_t query_rows, std::int64_t e) {
  return {e % query_rows, e / query_rows};
}

struct AttentionProblem {
  AttentionTiling tiling;
  AttentionMaskView mask;
  DropoutSiteView dropout;  // site 1 (attention probabilities)
  // The programs' plain bf16-operand variant (off: nothing rounded). The bf16 tensor-core kernels
  // feed f P (forward: O += (fP) V, cuda/attention/tensor_core_program.hpp; backward: dV = (fP)^T dO)
  // and dS (dK = dS^T Q, dQ = dS K, tensor_core_backward_program.hpp) to their matrix products as
  // bf16 operands with fp32 accumulation, as every bf16 flash attention does: the textbook
  // computation of such a kernel is this program with f P and dS rounded to bf16 where they are
  // produced and every other step as here (the row sums stay fp32, as the kernels keep them). It
  // is the plain computation SPEC §10 holds those kernels to; the default keeps f P and dS in fp32
  // (a more precise computation than the kernels').
  bool round_product_operands_to_bf16 = false;
};

// Row-major device tensors: q, out, d_out [T, nh d]; k/v_ctx [S, nkv d]; k/v_blk [T, nkv d];
// lse [T, nh] (fp32). out and lse are read by the backward programs only.
template <class Storage>
struct AttentionOperands {
  const Storage* q = nullptr;
  const Storage* k_ctx = nullptr;
  const Storage* v_ctx = nullptr;
  const Storage* k_blk = nullptr;
  const Storage* v_blk = nullptr;
  const Storage* out = nullptr;
  const Storage* d_out = nullptr;
  const float* lse = nullptr;
};

template <class Storage>
struct AttentionForwardOutputs {
  Storage* out = nullptr;  // [T, nh d]
  float* lse = nullptr;    // [T, nh]; 0 for a row that sees no key (its O row is 0)
};

// Gradients in fp32, each element written once (not accumulated): dq [T, nh d], dk/dv_ctx
// [S, nkv d], dk/dv_blk [T, nkv d]; delta [T, nh] (written by dq, read by dkv).
struct AttentionGradients {
  float* dq = nullptr;
  float* dk_ctx = nullptr;
  float* dv_ctx = nullptr;
  float* dk_blk = nullptr;
  float* dv_blk = nullptr;
  float* delta = nullptr;
};

namespace attention_program_detail {

DFLASH_HD inline float negative_infinity() { return -INFINITY; }

// Offset of head h's d values in row `row` of a [rows, heads d] tensor.
DFLASH_HD inline std::int64_t head_offset(std::int64_t row, std::int64_t heads, std::int64_t h, std::int64_t d) {
  return (row * heads + h) * d;
}

// Widened to float, summed in fp32. Callers outside this namespace qualify it: where
// reference/linalg.hpp is included first, its dflash::dot<Real>(const Real*, const Real*, n) is a
// better match for two bf16 (uint16) operands and would sum their raw bits as integers.
template <class A, class B>
DFLASH_HD float dot(const A* a, const B* b, std::int64_t d) {
  float sum = 0.0f;
  for (std::int64_t c = 0; c < d; ++c) sum += widen(a[c]) * widen(b[c]);
  return sum;
}

// Key row `key` of [context; block] for kv head g.
template <class Storage>
DFLASH_HD const Storage* key_row(const Storage* ctx, const Storage* blk, const AttentionTiling& tl, std::int64_t key,
                                 std::int64_t g) {
  return key < tl.S ? ctx + head_offset(key, tl.nkv, g, tl.d) : blk + head_offset(key - tl.S, tl.nkv, g, tl.d);
}

// Loads the key and value rows of one tile (kv head g) into shared memory, rows `stride` apart.
template <class Storage>
DFLASH_HD void load_key_tile(const AttentionTiling& tl, const AttentionOperands<Storage>& in, std::int64_t g,
                             const KeyTile& kt, Storage* k, Storage* v, std::int64_t stride, int thread, int threads) {
  for (std::int64_t e = thread; e < kt.count * tl.d; e += threads) {
    const std::int64_t c = e / tl.d, col = e % tl.d;
    k[c * stride + col] = key_row(in.k_ctx, in.k_blk, tl, kt.first + c, g)[col];
    v[c * stride + col] = key_row(in.v_ctx, in.v_blk, tl, kt.first + c, g)[col];
  }
}

// Loads the R rows of query tile (n, g) of a [T, nh d] tensor into shared memory, rows `stride`
// apart.
template <class Storage>
DFLASH_HD void load_query_rows(const AttentionTiling& tl, const Storage* src, std::int64_t n, std::int64_t g,
                               Storage* dst, std::int64_t stride, int thread, int threads) {
  for (std::int64_t e = thread; e < tl.query_rows() * tl.d; e += threads) {
    const std::int64_t r = e / tl.d, col = e % tl.d;
    dst[r * stride + col] = src[head_offset(n * tl.B + tl.row_token(r), tl.nh, tl.row_head(g, r), tl.d) + col];
  }
}

// The rows' lse and delta of query tile (n, g), from [T, nh] tensors.
DFLASH_HD inline void load_row_stats(const AttentionTiling& tl, const float* lse, const float* delta, std::int64_t n,
                                     std::int64_t g, float* lse_out, float* delta_out, int thread, int threads) {
  for (std::int64_t r = thread; r < tl.query_rows(); r += threads) {
    const std::int64_t at = (n * tl.B + tl.row_token(r)) * tl.nh + tl.row_head(g, r);
    lse_out[r] = lse[at];
    delta_out[r] = delta[at];
  }
}

// Shared memory of the backward programs' score tile: the query rows, dO rows, one key tile (each
// [rows, d] with row stride `row`, attention_shared_row_stride), and the tile's f P and dS
// ([KTmax, score_stride(R)], score_index).
template <class Storage>
struct BackwardTile {
  std::int64_t row;
  Storage* q;
  Storage* d_out;
  Storage* k;
  Storage* v;
  float* lse;
  float* delta;
  float* fp;  // f P: the dV weights
  float* ds;  // dS

  DFLASH_HD BackwardTile(SharedCarver& mem, const AttentionTiling& tl) {
    const std::int64_t R = tl.query_rows(), KT = tl.max_tile_keys();
    row = attention_shared_row_stride<Storage>(tl.d);
    q = mem.take<Storage>(R * row);
    d_out = mem.take<Storage>(R * row);
    k = mem.take<Storage>(KT * row);
    v = mem.take<Storage>(KT * row);
    lse = mem.take<float>(R);
    delta = mem.take<float>(R);
    fp = mem.take<float>(KT * score_stride(R));
    ds = mem.take<float>(KT * score_stride(R));
  }
};

// One visible (row, key) element of the backward, from its dot products q.k and dO.v, its dropout
// factor f and its row's lse and delta: f P (the dV weight) and dS (the dK and dQ weight).
DFLASH_HD inline void score_gradient_weights(float qk, float dov, float f, float lse, float delta, float sqrt_d,
                                             float& fp, float& ds) {
  const float p = exp_of(qk / sqrt_d - lse);
  const float dp = f * dov;
  fp = f * p;
  ds = p * (dp - delta) / sqrt_d;
}

// delta = dO . O of row r of query tile (n, g), from global memory (fp32, head dims ascending).
template <class Storage>
DFLASH_HD float row_delta(const AttentionTiling& tl, const AttentionOperands<Storage>& in, std::int64_t n,
                          std::int64_t g, std::int64_t r) {
  const std::int64_t at = head_offset(n * tl.B + tl.row_token(r), tl.nh, tl.row_head(g, r), tl.d);
  return dot(in.d_out + at, in.out + at, tl.d);
}

// Block n's keys when no query sees them (keep[n] = 0): their dK/dV is 0 (kv head g).
DFLASH_HD inline void zero_unseen_block_key_grads(const AttentionTiling& tl, const AttentionGradients& grads,
                                                  std::int64_t n, std::int64_t g, int thread, int threads) {
  for (std::int64_t e = thread; e < tl.B * tl.d; e += threads) {
    const std::int64_t at = head_offset(n * tl.B + e / tl.d, tl.nkv, g, tl.d) + e % tl.d;
    grads.dk_blk[at] = 0.0f;
    grads.dv_blk[at] = 0.0f;
  }
}

// Phase body of the dq programs: each row's lse and delta = dO . O (to `lse`, `delta` and, for the
// dkv program, grads.delta), and block n's key gradients zeroed when no query sees them.
template <class Storage>
DFLASH_HD void begin_query_tile_backward(const AttentionProblem& pb, const AttentionOperands<Storage>& in,
                                         const AttentionGradients& grads, std::int64_t n, std::int64_t g, float* lse,
                                         float* delta, int thread, int threads) {
  const AttentionTiling& tl = pb.tiling;
  for (std::int64_t r = thread; r < tl.query_rows(); r += threads) {
    const float dot_o = row_delta(tl, in, n, g, r);
    const std::int64_t row_head = (n * tl.B + tl.row_token(r)) * tl.nh + tl.row_head(g, r);
    lse[r] = in.lse[row_head];
    delta[r] = dot_o;
    grads.delta[row_head] = dot_o;
  }
  if (pb.mask.keep[n] == 0) zero_unseen_block_key_grads(tl, grads, n, g, thread, threads);
}

// Phase body: the dK/dV of context key tile kt (kv head g), accumulated in [keys, d] fp32 arrays
// with rows ld apart (>= d), to the gradients.
DFLASH_HD inline void store_context_key_grads(const AttentionTiling& tl, const AttentionGradients& grads,
                                              const KeyTile& kt, std::int64_t g, const float* dk, const float* dv,
                                              std::int64_t ld, int thread, int threads) {
  for (std::int64_t e = thread; e < kt.count * tl.d; e += threads) {
    const std::int64_t key = e / tl.d, col = e % tl.d;
    const std::int64_t at = head_offset(kt.first + key, tl.nkv, g, tl.d) + col;
    grads.dk_ctx[at] = dk[key * ld + col];
    grads.dv_ctx[at] = dv[key * ld + col];
  }
}

// Phase body: f P and dS of every (row, key) of the tile; zero where the key is hidden.
template <class Exec, class Storage>
DFLASH_HD void backward_scores(Exec& exec, const AttentionProblem& pb, const BackwardTile<Storage>& s, std::int64_t n,
                               std::int64_t g, const KeyTile& kt, int thread, int threads) {
  const AttentionTiling& tl = pb.tiling;
  const std::int64_t R = tl.query_rows();
  const float sqrt_d = sqrtf(static_cast<float>(tl.d));
  for (std::int64_t e = thread; e < R * kt.count; e += threads) {
    const auto [r, c] = score_of_element(R, e);
    const std::int64_t k = tl.row_token(r), key = kt.first + c;
    float fp = 0.0f, ds = 0.0f;
    if (pb.mask.visible(n, k, key)) {
      const std::uint64_t element = attention_dropout_element(tl.row_head(g, r), n * tl.B + k, key, tl.S, tl.T());
      const float f = pb.dropout.factor(element);
      if (pb.dropout.active) exec.drew(element, f);  // only a live site draws
      score_gradient_weights(dot(s.q + r * s.row, s.k + c * s.row, tl.d),
                             dot(s.d_out + r * s.row, s.v + c * s.row, tl.d), f, DFLASH_SHARED(s.lse[r]),
                             DFLASH_SHARED(s.delta[r]), sqrt_d, fp, ds);
      if (pb.round_product_operands_to_bf16) {
        fp = round_to_bf16(fp);
        ds = round_to_bf16(ds);
      }
    }
    DFLASH_SHARED(s.fp[score_index(R, r, c)]) = fp;
    DFLASH_SHARED(s.ds[score_index(R, r, c)]) = ds;
  }
}

// dK[c][col] = sum_r dS[r][c] q[r][col] and dV[c][col] = sum_r fP[r][c] dO[r][col] for key c of
// the tile, rows r in ascending order (the fixed reduction order of both backward programs).
template <class Storage>
DFLASH_HD void key_grads(const AttentionTiling& tl, const BackwardTile<Storage>& s, std::int64_t c, std::int64_t col,
                         float& dk, float& dv) {
  const std::int64_t R = tl.query_rows();
  dk = 0.0f;
  dv = 0.0f;
  for (std::int64_t r = 0; r < R; ++r) {
    dk += DFLASH_SHARED(s.ds[score_index(R, r, c)]) * widen(s.q[r * s.row + col]);
    dv += DFLASH_SHARED(s.fp[score_index(R, r, c)]) * widen(s.d_out[r * s.row + col]);
  }
}

}  // namespace attention_program_detail

// ---- forward -------------------------------------------------------------------------------

template <class Storage>
struct AttentionForwardShared {
  std::int64_t row;  // row stride of q, k, v (attention_shared_row_stride)
  Storage* q;        // [R, d]
  Storage* k;        // [KTmax, d]
  Storage* v;        // [KTmax, d]
  float* p;          // [KTmax, score_stride(R)] (score_index) scores, then f exp(s - m)
  float* acc;        // [R, d] unnormalised output
  float* row_max;    // [R] running max m
  float* row_sum;    // [R] running sum l of exp(s - m) (without dropout: it normalises P)
  float* rescale;    // [R] exp(m_old - m_new) of the current tile

  DFLASH_HD AttentionForwardShared(SharedCarver& mem, const AttentionTiling& tl)
      : row(attention_shared_row_stride<Storage>(tl.d)),
        q(mem.take<Storage>(tl.query_rows() * row)),
        k(mem.take<Storage>(tl.max_tile_keys() * row)),
        v(mem.take<Storage>(tl.max_tile_keys() * row)),
        p(mem.take<float>(tl.max_tile_keys() * score_stride(tl.query_rows()))),
        acc(mem.take<float>(tl.query_rows() * tl.d)),
        row_max(mem.take<float>(tl.query_rows())),
        row_sum(mem.take<float>(tl.query_rows())),
        rescale(mem.take<float>(tl.query_rows())) {}
};

template <class Storage>
DFLASH_HD std::size_t attention_forward_shared_bytes(const AttentionTiling& tl) {
  return shared_layout_bytes<AttentionForwardShared<Storage>>(tl);
}

template <class Exec, class Storage>
DFLASH_HD void attention_forward_block(Exec& exec, const AttentionProblem& pb, const AttentionOperands<Storage>& in,
                                       const AttentionForwardOutputs<Storage>& out, unsigned char* shared,
                                       std::int64_t query_tile) {
  using namespace attention_program_detail;
  const AttentionTiling& tl = pb.tiling;
  SharedCarver mem(shared);
  const AttentionForwardShared<Storage> sm(mem, tl);
  const std::int64_t n = query_tile / tl.nkv, g = query_tile % tl.nkv;
  const std::int64_t R = tl.query_rows(), d = tl.d;
  const int threads = exec.threads();
  const float sqrt_d = sqrtf(static_cast<float>(d));

  exec.phase([&](int t) {
    load_query_rows(tl, in.q, n, g, sm.q, sm.row, t, threads);
    for (std::int64_t e = t; e < R * d; e += threads) DFLASH_SHARED(sm.acc[e]) = 0.0f;
    for (std::int64_t r = t; r < R; r += threads) {
      DFLASH_SHARED(sm.row_max[r]) = negative_infinity();
      DFLASH_SHARED(sm.row_sum[r]) = 0.0f;
    }
  });
  const std::int64_t steps = query_tile_steps(tl, pb.mask, n);
  for (std::int64_t step = 0; step < steps; ++step) {
    const KeyTile kt = query_tile_step(tl, pb.mask, n, step);
    exec.visit(kt.first);
    exec.phase([&](int t) { load_key_tile(tl, in, g, kt, sm.k, sm.v, sm.row, t, threads); });
    exec.phase([&](int t) {  // scores; -inf where hidden
      for (std::int64_t e = t; e < R * kt.count; e += threads) {
        const auto [r, c] = score_of_element(R, e);
        DFLASH_SHARED(sm.p[score_index(R, r, c)]) =
            pb.mask.visible(n, tl.row_token(r), kt.first + c)
                ? attention_program_detail::dot(sm.q + r * sm.row, sm.k + c * sm.row, d) / sqrt_d
                : negative_infinity();
      }
    });
    exec.phase([&](int t) {  // online softmax, one thread per row
      for (std::int64_t r = t; r < R; r += threads) {
        float tile_max = negative_infinity();
        for (std::int64_t c = 0; c < kt.count; ++c) {
          const float s = DFLASH_SHARED(sm.p[score_index(R, r, c)]);
          tile_max = s > tile_max ? s : tile_max;
        }
        const float m_old = DFLASH_SHARED(sm.row_max[r]);
        const float m_new = tile_max > m_old ? tile_max : m_old;
        if (m_new == negative_infinity()) {  // nothing visible yet: nothing changes
          DFLASH_SHARED(sm.rescale[r]) = 1.0f;
          for (std::int64_t c = 0; c < kt.count; ++c) DFLASH_SHARED(sm.p[score_index(R, r, c)]) = 0.0f;
          continue;
        }
        const float alpha = exp_of(m_old - m_new);  // 0 when m_old = -inf
        const std::int64_t h = tl.row_head(g, r), i = n * tl.B + tl.row_token(r);
        float sum = 0.0f;
        for (std::int64_t c = 0; c < kt.count; ++c) {
          const float s = DFLASH_SHARED(sm.p[score_index(R, r, c)]);
          if (s == negative_infinity()) {
            DFLASH_SHARED(sm.p[score_index(R, r, c)]) = 0.0f;
            continue;
          }
          const float e = exp_of(s - m_new);
          sum += e;
          const std::uint64_t element = attention_dropout_element(h, i, kt.first + c, tl.S, tl.T());
          const float f = pb.dropout.factor(element);
          if (pb.dropout.active) exec.drew(element, f);  // only a live site draws
          DFLASH_SHARED(sm.p[score_index(R, r, c)]) = pb.round_product_operands_to_bf16 ? round_to_bf16(e * f) : e * f;
        }
        float& row_sum = DFLASH_SHARED(sm.row_sum[r]);
        row_sum = row_sum * alpha + sum;
        DFLASH_SHARED(sm.row_max[r]) = m_new;
        DFLASH_SHARED(sm.rescale[r]) = alpha;
      }
    });
    exec.phase([&](int t) {  // acc = acc alpha + (f P) V
      for (std::int64_t e = t; e < R * d; e += threads) {
        const std::int64_t r = e / d, col = e % d;
        float a = DFLASH_SHARED(sm.acc[e]) * DFLASH_SHARED(sm.rescale[r]);
        for (std::int64_t c = 0; c < kt.count; ++c) {
          a += DFLASH_SHARED(sm.p[score_index(R, r, c)]) * widen(sm.v[c * sm.row + col]);
        }
        DFLASH_SHARED(sm.acc[e]) = a;
      }
    });
  }
  exec.phase([&](int t) {
    for (std::int64_t e = t; e < R * d; e += threads) {
      const std::int64_t r = e / d, col = e % d;
      const float l = DFLASH_SHARED(sm.row_sum[r]);
      const std::int64_t at = head_offset(n * tl.B + tl.row_token(r), tl.nh, tl.row_head(g, r), d) + col;
      narrow_into(l > 0.0f ? DFLASH_SHARED(sm.acc[e]) / l : 0.0f, out.out[at]);
    }
    for (std::int64_t r = t; r < R; r += threads) {
      const float l = DFLASH_SHARED(sm.row_sum[r]);
      out.lse[(n * tl.B + tl.row_token(r)) * tl.nh + tl.row_head(g, r)] =
          l > 0.0f ? DFLASH_SHARED(sm.row_max[r]) + log_of(l) : 0.0f;
    }
  });
}

// ---- backward: dQ (and the block keys' dK/dV) ------------------------------------------------

template <class Storage>
struct AttentionDqShared {
  attention_program_detail::BackwardTile<Storage> tile;
  float* dq;  // [R, d]

  DFLASH_HD AttentionDqShared(SharedCarver& mem, const AttentionTiling& tl)
      : tile(mem, tl), dq(mem.take<float>(tl.query_rows() * tl.d)) {}
};

template <class Storage>
DFLASH_HD std::size_t attention_dq_shared_bytes(const AttentionTiling& tl) {
  return shared_layout_bytes<AttentionDqShared<Storage>>(tl);
}

template <class Exec, class Storage>
DFLASH_HD void attention_dq_block(Exec& exec, const AttentionProblem& pb, const AttentionOperands<Storage>& in,
                                  const AttentionGradients& grads, unsigned char* shared, std::int64_t query_tile) {
  using namespace attention_program_detail;
  const AttentionTiling& tl = pb.tiling;
  SharedCarver mem(shared);
  const AttentionDqShared<Storage> sm(mem, tl);
  const BackwardTile<Storage>& s = sm.tile;
  const std::int64_t n = query_tile / tl.nkv, g = query_tile % tl.nkv;
  const std::int64_t R = tl.query_rows(), d = tl.d;
  const int threads = exec.threads();

  exec.phase([&](int t) {
    load_query_rows(tl, in.q, n, g, s.q, s.row, t, threads);
    load_query_rows(tl, in.d_out, n, g, s.d_out, s.row, t, threads);
    for (std::int64_t e = t; e < R * d; e += threads) DFLASH_SHARED(sm.dq[e]) = 0.0f;
    begin_query_tile_backward(pb, in, grads, n, g, s.lse, s.delta, t, threads);
  });
  const std::int64_t steps = query_tile_steps(tl, pb.mask, n);
  for (std::int64_t step = 0; step < steps; ++step) {
    const KeyTile kt = query_tile_step(tl, pb.mask, n, step);
    exec.visit(kt.first);
    exec.phase([&](int t) { load_key_tile(tl, in, g, kt, s.k, s.v, s.row, t, threads); });
    exec.phase([&](int t) { backward_scores(exec, pb, s, n, g, kt, t, threads); });
    exec.phase([&](int t) {
      for (std::int64_t e = t; e < R * d; e += threads) {  // dQ += dS K
        const std::int64_t r = e / d, col = e % d;
        float a = DFLASH_SHARED(sm.dq[e]);
        for (std::int64_t c = 0; c < kt.count; ++c) {
          a += DFLASH_SHARED(s.ds[score_index(R, r, c)]) * widen(s.k[c * s.row + col]);
        }
        DFLASH_SHARED(sm.dq[e]) = a;
      }
      if (kt.is_block) {  // this query tile is the only one that sees these keys
        for (std::int64_t e = t; e < kt.count * d; e += threads) {
          const std::int64_t c = e / d, col = e % d;
          float dk, dv;
          key_grads(tl, s, c, col, dk, dv);
          const std::int64_t at = head_offset(kt.first - tl.S + c, tl.nkv, g, d) + col;
          grads.dk_blk[at] = dk;
          grads.dv_blk[at] = dv;
        }
      }
    });
  }
  exec.phase([&](int t) {
    for (std::int64_t e = t; e < R * d; e += threads) {
      const std::int64_t r = e / d, col = e % d;
      grads.dq[head_offset(n * tl.B + tl.row_token(r), tl.nh, tl.row_head(g, r), d) + col] = DFLASH_SHARED(sm.dq[e]);
    }
  });
}

// ---- backward: dK/dV of the context keys ------------------------------------------------------

template <class Storage>
struct AttentionDkvShared {
  attention_program_detail::BackwardTile<Storage> tile;
  float* dk;  // [KTmax, d]
  float* dv;  // [KTmax, d]

  DFLASH_HD AttentionDkvShared(SharedCarver& mem, const AttentionTiling& tl)
      : tile(mem, tl), dk(mem.take<float>(tl.max_tile_keys() * tl.d)), dv(mem.take<float>(tl.max_tile_keys() * tl.d)) {}
};

template <class Storage>
DFLASH_HD std::size_t attention_dkv_shared_bytes(const AttentionTiling& tl) {
  return shared_layout_bytes<AttentionDkvShared<Storage>>(tl);
}

// Grid: context_tiles() x nkv blocks; block b handles context tile b / nkv for kv head b % nkv.
// Reads grads.delta written by the dq program (launched first).
template <class Exec, class Storage>
DFLASH_HD void attention_dkv_block(Exec& exec, const AttentionProblem& pb, const AttentionOperands<Storage>& in,
                                   const AttentionGradients& grads, unsigned char* shared, std::int64_t block) {
  using namespace attention_program_detail;
  const AttentionTiling& tl = pb.tiling;
  SharedCarver mem(shared);
  const AttentionDkvShared<Storage> sm(mem, tl);
  const BackwardTile<Storage>& s = sm.tile;
  const std::int64_t tile = block / tl.nkv, g = block % tl.nkv;
  const KeyTile kt = context_key_tile(tl, tile);
  const std::int64_t d = tl.d;
  const int threads = exec.threads();

  exec.phase([&](int t) {
    load_key_tile(tl, in, g, kt, s.k, s.v, s.row, t, threads);
    for (std::int64_t e = t; e < kt.count * d; e += threads) {
      DFLASH_SHARED(sm.dk[e]) = 0.0f;
      DFLASH_SHARED(sm.dv[e]) = 0.0f;
    }
  });
  for (std::int64_t n = 0; n < tl.N; ++n) {  // ascending n: the fixed reduction order
    if (!context_tiles_of_block(tl, pb.mask, n).contains(tile)) continue;
    exec.visit(n);  // bookkeeping: the query block visited
    exec.phase([&](int t) {
      load_query_rows(tl, in.q, n, g, s.q, s.row, t, threads);
      load_query_rows(tl, in.d_out, n, g, s.d_out, s.row, t, threads);
      load_row_stats(tl, in.lse, grads.delta, n, g, s.lse, s.delta, t, threads);
    });
    exec.phase([&](int t) { backward_scores(exec, pb, s, n, g, kt, t, threads); });
    exec.phase([&](int t) {
      for (std::int64_t e = t; e < kt.count * d; e += threads) {
        float dk, dv;
        key_grads(tl, s, e / d, e % d, dk, dv);
        DFLASH_SHARED(sm.dk[e]) += dk;
        DFLASH_SHARED(sm.dv[e]) += dv;
      }
    });
  }
  exec.phase([&](int t) { store_context_key_grads(tl, grads, kt, g, sm.dk, sm.dv, tl.d, t, threads); });
}

}  // namespace dflash
