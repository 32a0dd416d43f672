// The trunk's elementwise and per-row kernels (SPEC §3, §6) as DFLASH_HD bodies that the CUDA
// kernels (cuda/trunk/elementwise_kernels.cu) and the CPU tests run alike:
//   one thread per element     embedding gather, SwiGLU, residual add with hidden dropout
//   one thread per (row, head) q/k RMSNorm_d + RoPE (a RoPE pair at a time)
//   one block per row          RMSNorm over H (cuda/exec/block_program.hpp: per-thread partial sums,
//                              then thread 0 adds them in thread order: a fixed reduction)
//   one block per 8 columns    a norm weight's gradient: row lanes, then a fixed tree over the lanes
// Residual stream, statistics and gradients are fp32; `Storage` is the GEMM-facing format (bf16
// bits on the GPU, float in the CPU tests). The formulas are the reference's own
// (reference/rms_norm.hpp, reference/mlp.hpp, common/rope_rotation.hpp) instantiated in float.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/dropout_site_view.hpp"
#include "common/hd.hpp"
#include "common/rope_rotation.hpp"
#include "common/storage.hpp"
#include "cuda/exec/block_program.hpp"
#include "reference/mlp.hpp"
#include "reference/rms_norm.hpp"

namespace dflash {

inline constexpr int kNormRowThreads = 256;  // threads of a row-RMSNorm block

// ---- format change: an fp32 gradient becomes a bf16 GEMM operand ------------------------------

template <class Storage>
DFLASH_HD void narrow_at(std::int64_t e, const float* x, Storage* y) {
  narrow_into(x[e], y[e]);
}

// ---- embedding gather: X[i, c] = E[tok_i, c] -------------------------------------------------

template <class Storage>
DFLASH_HD void embedding_gather_at(std::int64_t e, std::int64_t H, const std::int64_t* tokens, const Storage* table,
                                   float* x) {
  x[e] = widen(table[tokens[e / H] * H + e % H]);
}

// ---- RMSNorm over rows of H (one block per row) ----------------------------------------------

struct RmsNormRowShared {
  float* partial;  // [threads]
  float* scalar;   // [1]: rstd (forward) or rstd^3 (g . x) / H (backward)
  DFLASH_HD RmsNormRowShared(SharedCarver& mem, int threads)
      : partial(mem.take<float>(threads)), scalar(mem.take<float>(1)) {}
};

DFLASH_HD inline std::size_t rms_norm_row_shared_bytes(int threads) {
  return shared_layout_bytes<RmsNormRowShared>(threads);
}

// Thread t's partial sum over columns t, t + threads, ...; then thread 0 adds the partials in
// thread order into sm.scalar[0]. `term(c)` is the summand of column c.
template <class Exec, class Term>
DFLASH_HD void row_sum_phases(Exec& exec, const RmsNormRowShared& sm, std::int64_t n, Term term) {
  const int threads = exec.threads();
  exec.phase([&](int t) {
    float s = 0.0f;
    for (std::int64_t c = t; c < n; c += threads) s += term(c);
    sm.partial[t] = s;
  });
  exec.phase([&](int t) {
    if (t != 0) return;
    float s = 0.0f;
    for (int k = 0; k < threads; ++k) s += sm.partial[k];
    sm.scalar[0] = s;
  });
}

// y = w (x rstd), rstd = 1 / sqrt(mean(x^2) + eps), for row `row` of x [rows, H].
template <class Exec, class Storage>
DFLASH_HD void rms_norm_forward_block(Exec& exec, const float* x, const float* w, std::int64_t H, float eps, Storage* y,
                                      float* rstd, unsigned char* shared, std::int64_t row) {
  SharedCarver mem(shared);
  const RmsNormRowShared sm(mem, exec.threads());
  const float* xr = x + row * H;
  row_sum_phases(exec, sm, H, [&](std::int64_t c) { return xr[c] * xr[c]; });
  exec.phase([&](int t) {
    if (t != 0) return;
    const float r = 1.0f / sqrtf(sm.scalar[0] / static_cast<float>(H) + eps);
    sm.scalar[0] = r;
    rstd[row] = r;
  });
  const int threads = exec.threads();
  exec.phase([&](int t) {
    const float r = sm.scalar[0];
    for (std::int64_t c = t; c < H; c += threads) narrow_into(w[c] * (xr[c] * r), y[row * H + c]);
  });
}

// dx += rstd (w dy) - x rstd^3 ((w dy) . x) / H for row `row` (the weight's gradient is
// rms_norm_weight_grad_column's, over all rows).
template <class Exec>
DFLASH_HD void rms_norm_backward_block(Exec& exec, const float* x, const float* w, const float* rstd, const float* dy,
                                       std::int64_t H, float* dx, unsigned char* shared, std::int64_t row) {
  SharedCarver mem(shared);
  const RmsNormRowShared sm(mem, exec.threads());
  const float* xr = x + row * H;
  const float* dyr = dy + row * H;
  const float r = rstd[row];
  row_sum_phases(exec, sm, H, [&](std::int64_t c) { return (w[c] * dyr[c]) * xr[c]; });
  exec.phase([&](int t) {
    if (t == 0) sm.scalar[0] = r * r * r * sm.scalar[0] / static_cast<float>(H);
  });
  const int threads = exec.threads();
  exec.phase([&](int t) {
    const float coef = sm.scalar[0];
    for (std::int64_t c = t; c < H; c += threads) dx[row * H + c] += r * (w[c] * dyr[c]) - xr[c] * coef;
  });
}

// ---- a norm weight's gradient over rows (one block per group of columns) ----------------------
//
// dw[c] += sum over rows r of dy[r, c] (x[r, c] rstd[r]), x and dy [rows, n]. The rows are many
// (T nh = 10^6 for q_norm at full scale) and the columns few (d = 128): one thread per column, each
// summing every row, would run on one SM, latency-bound. So a block takes kNormWeightGradColumns
// columns (8 floats: one 32-byte sector of a row, so a warp's load is 4 whole sectors) and its
// kNormWeightGradThreads threads are row lanes x those columns: lane j sums rows j, j + lanes, ...
// in ascending order, then the lanes' partials are added pairwise, lane j += lane j + s for s =
// lanes/2, ..., 1 (a fixed tree: the CPU and the GPU add in the same order). Each block writes only
// its own columns, one writer per dw[c]: no atomics, no scratch beyond shared memory.
inline constexpr int kNormWeightGradColumns = 8;
inline constexpr int kNormWeightGradThreads = 1024;  // 128 row lanes (a power of two: the tree halves them)

struct NormWeightGradShared {
  float* partial;  // [threads]: thread t = lane * kNormWeightGradColumns + column of the group
  DFLASH_HD NormWeightGradShared(SharedCarver& mem, int threads) : partial(mem.take<float>(threads)) {}
};

DFLASH_HD inline std::size_t rms_norm_weight_grad_shared_bytes(int threads) {
  return shared_layout_bytes<NormWeightGradShared>(threads);
}

// Blocks of the weight gradient's grid: one per kNormWeightGradColumns columns.
DFLASH_HD inline std::int64_t rms_norm_weight_grad_blocks(std::int64_t n) {
  return (n + kNormWeightGradColumns - 1) / kNormWeightGradColumns;
}

// Block `group`: columns group kNormWeightGradColumns + [0, kNormWeightGradColumns) that are < n.
template <class Exec>
DFLASH_HD void rms_norm_weight_grad_block(Exec& exec, const float* x, const float* rstd, const float* dy,
                                          std::int64_t rows, std::int64_t n, float* dw, unsigned char* shared,
                                          std::int64_t group) {
  SharedCarver mem(shared);
  const NormWeightGradShared sm(mem, exec.threads());
  const int lanes = exec.threads() / kNormWeightGradColumns;
  exec.phase([&](int t) {
    const std::int64_t c = group * kNormWeightGradColumns + t % kNormWeightGradColumns;
    float s = 0.0f;
    if (c < n) {
      for (std::int64_t r = t / kNormWeightGradColumns; r < rows; r += lanes)
        s += dy[r * n + c] * (x[r * n + c] * rstd[r]);
    }
    sm.partial[t] = s;
  });
  for (int stride = lanes / 2; stride >= 1; stride /= 2) {
    exec.phase([&](int t) {
      if (t / kNormWeightGradColumns < stride) sm.partial[t] += sm.partial[t + stride * kNormWeightGradColumns];
    });
  }
  exec.phase([&](int t) {
    const std::int64_t c = group * kNormWeightGradColumns + t;
    if (t < kNormWeightGradColumns && c < n) dw[c] += sm.partial[t];
  });
}

// ---- q/k RMSNorm_d + RoPE (one thread per (row, head)) ----------------------------------------

// cos and sin of pair i at `position`, from the angle in double (common/rope_rotation.hpp).
DFLASH_HD inline void rope_cos_sin(std::int64_t position, std::int64_t i, std::int64_t d, double theta, float& c,
                                   float& s) {
  const double phi = rope_angle(position, i, d, theta);
  c = static_cast<float>(cos(phi));
  s = static_cast<float>(sin(phi));
}

// out[rh] = RoPE(RMSNorm_d(proj[rh]; w), position of row rh / heads); rstd[rh]. proj, out [rows heads, d].
// rstd first, then each RoPE pair (i, i + d/2) normed, rotated and stored: no row of y is kept, so
// a thread holds two values, not d (a d-float array would live in local memory on the GPU).
template <class Storage>
DFLASH_HD void head_norm_rope_forward_at(std::int64_t rh, const float* proj, const float* w, std::int64_t heads,
                                         std::int64_t d, float eps, const std::int64_t* positions, double theta,
                                         Storage* out, float* rstd) {
  const float* x = proj + rh * d;
  const float r = rms_norm_rstd(x, d, eps);
  rstd[rh] = r;
  const std::int64_t half = d / 2, position = positions[rh / heads];
  for (std::int64_t i = 0; i < half; ++i) {
    float c, s;
    rope_cos_sin(position, i, d, theta, c, s);
    float a = rms_norm_value(x[i], w[i], r), b = rms_norm_value(x[i + half], w[i + half], r);
    rope_rotate(a, b, c, s);
    narrow_into(a, out[rh * d + i]);
    narrow_into(b, out[rh * d + i + half]);
  }
}

// d_out[rh] (dL/d out) is rotated back in place (it becomes dL/d RMSNorm_d, which the weight
// gradient reads), then d_proj[rh] = its input gradient (written, not accumulated).
DFLASH_HD inline void head_norm_rope_backward_at(std::int64_t rh, float* d_out, const float* proj, const float* w,
                                                 const float* rstd, std::int64_t heads, std::int64_t d,
                                                 const std::int64_t* positions, double theta, float* d_proj) {
  float* g = d_out + rh * d;
  const std::int64_t half = d / 2, position = positions[rh / heads];
  for (std::int64_t i = 0; i < half; ++i) {
    float c, s;
    rope_cos_sin(position, i, d, theta, c, s);
    rope_unrotate(g[i], g[i + half], c, s);
  }
  for (std::int64_t k = 0; k < d; ++k) d_proj[rh * d + k] = 0.0f;
  rms_norm_input_grad(proj + rh * d, w, rstd[rh], g, d, d_proj + rh * d);
}

// ---- SwiGLU (one thread per element) ----------------------------------------------------------

template <class Storage>
DFLASH_HD void swiglu_forward_at(std::int64_t e, const Storage* gate, const Storage* up, Storage* act) {
  const float g = widen(gate[e]), u = widen(up[e]);
  float a;
  swiglu_forward(&g, &u, &a, 1);
  narrow_into(a, act[e]);
}

template <class Storage>
DFLASH_HD void swiglu_backward_at(std::int64_t e, const Storage* gate, const Storage* up, const float* d_act,
                                  float* d_gate, float* d_up) {
  const float g = widen(gate[e]), u = widen(up[e]);
  swiglu_backward(&g, &u, d_act + e, d_gate + e, d_up + e, 1);
}

// ---- residual add with hidden dropout (sites 2, 3; element i H + c) ----------------------------

DFLASH_HD inline void residual_dropout_forward_at(std::int64_t e, const float* x, const float* branch,
                                                  const DropoutSiteView& dropout, float* out) {
  out[e] = x[e] + branch[e] * dropout.factor(static_cast<std::uint64_t>(e));
}

DFLASH_HD inline void residual_dropout_backward_at(std::int64_t e, const float* d_out, const DropoutSiteView& dropout,
                                                   float* d_branch) {
  d_branch[e] = d_out[e] * dropout.factor(static_cast<std::uint64_t>(e));
}

}  // namespace dflash
