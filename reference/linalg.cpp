// matrix_product for double: the loop nest of GotoBLAS/BLIS (pack a KC x NC block of B, pack an
// MC x KC block of A, sweep MR x NR register tiles over them), with one change that matters here:
// the k loop of every output element runs in one piece, ascending, products rounded and added
// separately. A register tile holds MR x NR independent sums and extends each by one term per k,
// so vectorising across the tile's columns and splitting K into KC blocks (the partial sum goes to
// C and comes back, exactly) leave every element's chain of roundings as linalg_plain computes it.
//
// The tile code is one template, compiled three times under GCC target attributes (SSE2, AVX2,
// AVX-512F) and picked at run time from the CPU's features, so one binary runs on any x86-64. The
// three differ only in tile shape and vector width, never in arithmetic order: they return the
// same bits (checked in tests/reference/test_linalg.cpp). No FMA: a fused multiply-add would round
// once where the plain loops round twice.
//
// Threads split the output into contiguous ranges of columns (or of rows, when there are more
// row tiles than column tiles); each thread packs its own blocks, so no two threads write the same
// element and no sum crosses threads. The packing buffers are this product's workspace, like a
// BLAS's: bounded by the block sizes (about 2.4 MB per thread), not by the problem, and not
// counted by the MemoryTracker, which counts tensors.
#include "reference/linalg.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "io/errors.hpp"
#include "reference/threads.hpp"

namespace dflash {
namespace {

using i64 = std::int64_t;

struct ProductArgs {
  StridedMatrix a, b;
  double* c;
  i64 ldc, m, n, k;
  bool accumulate;
};

// One thread's share of the output: rows [i0, i1), columns [j0, j1).
struct Region {
  i64 i0, i1, j0, j1;
};

template <int W>
struct Lanes;
template <>
struct Lanes<2> {
  typedef double type __attribute__((vector_size(16)));
};
template <>
struct Lanes<4> {
  typedef double type __attribute__((vector_size(32)));
};
template <>
struct Lanes<8> {
  typedef double type __attribute__((vector_size(64)));
};

constexpr i64 kMC = 96;    // rows of A packed at once (MC x KC stays in L2), a multiple of every MR
constexpr i64 kNC = 1056;  // columns of B packed at once (KC x NC in L3), a multiple of every NR

// Terms of k per block: a KC x NR panel of B (at most 64 KB) is reused, from L1/L2, by every
// MR-row panel of the packed A block. 256 beat 128 on the AVX-512 tile (Zen 4, -12%).
constexpr i64 kKC = 256;

// Register tile MR x (NV vectors of W doubles).
template <int W, int MR, int NV>
struct Tile {
  using V = typename Lanes<W>::type;
  static constexpr int MR_ = MR;
  static constexpr int NR = W * NV;
  static constexpr i64 KC = kKC;

  // c[MR x NR] (+)= ap[kc x MR]^T bp[kc x NR], starting from c when load, else from 0.
  [[gnu::always_inline]] static inline void multiply(const double* ap, const double* bp, i64 kc, double* c, i64 ldc,
                                                     bool load) {
    V acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        if (load) {
          std::memcpy(&acc[r][v], c + r * ldc + v * W, sizeof(V));
        } else {
          acc[r][v] = V{};
        }
      }
    }
    for (i64 kk = 0; kk < kc; ++kk) {
      V b[NV];
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) std::memcpy(&b[v], bp + kk * NR + v * W, sizeof(V));
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const double a = ap[kk * MR + r];
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[r][v] = acc[r][v] + a * b[v];
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) std::memcpy(c + r * ldc + v * W, &acc[r][v], sizeof(V));
    }
  }

  // Lanes [l0, l0 + count) of a matrix (A's rows or B's columns: element (lane, k) at
  // data[lane * lane_stride + k * k_stride]), k in [k0, k0 + kc), into panels of P lanes, each
  // [kc][P]; lanes past the end are 0.
  template <int P>
  [[gnu::always_inline]] static inline void pack(const double* data, i64 lane_stride, i64 k_stride, i64 l0, i64 count,
                                                 i64 k0, i64 kc, double* out) {
    for (i64 q = 0; q < count; q += P) {
      const i64 lanes = std::min<i64>(P, count - q);
      for (i64 kk = 0; kk < kc; ++kk) {
        const double* src = data + (l0 + q) * lane_stride + (k0 + kk) * k_stride;
        for (i64 l = 0; l < P; ++l) out[kk * P + l] = l < lanes ? src[l * lane_stride] : 0.0;
      }
      out += P * kc;
    }
  }

  // The product over one region, k in one ascending sweep of KC blocks.
  [[gnu::always_inline]] static inline void region(const ProductArgs& p, const Region& g, double* a_pack,
                                                   double* b_pack) {
    for (i64 jc = g.j0; jc < g.j1; jc += kNC) {
      const i64 nc = std::min(kNC, g.j1 - jc);
      for (i64 pc = 0; pc < p.k; pc += KC) {
        const i64 kc = std::min(KC, p.k - pc);
        const bool load = p.accumulate || pc > 0;
        pack<NR>(p.b.data, p.b.col_stride, p.b.row_stride, jc, nc, pc, kc, b_pack);
        for (i64 ic = g.i0; ic < g.i1; ic += kMC) {
          const i64 mc = std::min(kMC, g.i1 - ic);
          pack<MR>(p.a.data, p.a.row_stride, p.a.col_stride, ic, mc, pc, kc, a_pack);
          for (i64 jr = 0; jr < nc; jr += NR) {
            const i64 cols = std::min<i64>(NR, nc - jr);
            for (i64 ir = 0; ir < mc; ir += MR) {
              const i64 rows = std::min<i64>(MR, mc - ir);
              double* c = p.c + (ic + ir) * p.ldc + jc + jr;
              const double* ap = a_pack + ir * kc;
              const double* bp = b_pack + jr * kc;
              if (rows == MR && cols == NR) {
                multiply(ap, bp, kc, c, p.ldc, load);
                continue;
              }
              // An edge tile goes through a full-size copy; the lanes outside C are never stored.
              double t[MR * NR] = {};
              for (i64 r = 0; r < rows && load; ++r) std::memcpy(t + r * NR, c + r * p.ldc, cols * sizeof(double));
              multiply(ap, bp, kc, t, NR, true);
              for (i64 r = 0; r < rows; ++r) std::memcpy(c + r * p.ldc, t + r * NR, cols * sizeof(double));
            }
          }
        }
      }
    }
  }
};

// Tile shapes measured on Zen 4 (GFLOP/s per core, no FMA): AVX2 4 x 12 ~38; AVX-512 4 x 32 ~37,
// 8 x 24 and 6 x 24 a few % slower.
using SseTile = Tile<2, 4, 3>;     // 12 xmm accumulators of the 16
using Avx2Tile = Tile<4, 4, 3>;    // 12 ymm accumulators of the 16
using Avx512Tile = Tile<8, 4, 4>;  // 16 zmm accumulators of the 32

void region_sse2(const ProductArgs& p, const Region& g, double* a_pack, double* b_pack) {
  SseTile::region(p, g, a_pack, b_pack);
}
[[gnu::target("avx2")]] void region_avx2(const ProductArgs& p, const Region& g, double* a_pack, double* b_pack) {
  Avx2Tile::region(p, g, a_pack, b_pack);
}
[[gnu::target("avx512f")]] void region_avx512(const ProductArgs& p, const Region& g, double* a_pack, double* b_pack) {
  Avx512Tile::region(p, g, a_pack, b_pack);
}

// y += alpha x, W lanes at a time, the tail one by one (each element one multiply, one add).
template <int W>
[[gnu::always_inline]] inline void axpy_lanes(i64 n, double alpha, const double* x, double* y) {
  using V = typename Lanes<W>::type;
  i64 c = 0;
  for (; c + W <= n; c += W) {
    V xv, yv;
    std::memcpy(&xv, x + c, sizeof(V));
    std::memcpy(&yv, y + c, sizeof(V));
    yv = yv + alpha * xv;
    std::memcpy(y + c, &yv, sizeof(V));
  }
  for (; c < n; ++c) y[c] += alpha * x[c];
}
void axpy_sse2(i64 n, double alpha, const double* x, double* y) { axpy_lanes<2>(n, alpha, x, y); }
[[gnu::target("avx2")]] void axpy_avx2(i64 n, double alpha, const double* x, double* y) {
  axpy_lanes<4>(n, alpha, x, y);
}
[[gnu::target("avx512f")]] void axpy_avx512(i64 n, double alpha, const double* x, double* y) {
  axpy_lanes<8>(n, alpha, x, y);
}

struct IsaKernel {
  void (*region)(const ProductArgs&, const Region&, double*, double*);
  int mr, nr;
};

IsaKernel kernel_for(ProductIsa isa) {
  switch (isa) {
    case ProductIsa::avx512:
      return {region_avx512, Avx512Tile::MR_, Avx512Tile::NR};
    case ProductIsa::avx2:
      return {region_avx2, Avx2Tile::MR_, Avx2Tile::NR};
    case ProductIsa::sse2:
      break;
  }
  return {region_sse2, SseTile::MR_, SseTile::NR};
}

// Below this many multiply-adds a product runs on one thread (starting threads would cost more).
constexpr i64 kMinParallelWork = i64(1) << 16;

}  // namespace

std::string_view product_isa_name(ProductIsa isa) {
  switch (isa) {
    case ProductIsa::avx512:
      return "avx512";
    case ProductIsa::avx2:
      return "avx2";
    case ProductIsa::sse2:
      break;
  }
  return "sse2";
}

std::vector<ProductIsa> product_isas_this_cpu_runs() {
  __builtin_cpu_init();
  std::vector<ProductIsa> isas{ProductIsa::sse2};
  if (__builtin_cpu_supports("avx2")) isas.push_back(ProductIsa::avx2);
  if (__builtin_cpu_supports("avx512f")) isas.push_back(ProductIsa::avx512);
  return isas;
}

ProductIsa best_product_isa() {
  static const ProductIsa best = product_isas_this_cpu_runs().back();
  return best;
}

void axpy(std::int64_t n, double alpha, const double* x, double* y) {
  static const auto kernel = [] {
    switch (best_product_isa()) {
      case ProductIsa::avx512:
        return axpy_avx512;
      case ProductIsa::avx2:
        return axpy_avx2;
      case ProductIsa::sse2:
        break;
    }
    return axpy_sse2;
  }();
  kernel(n, alpha, x, y);
}

void matrix_product(StridedMatrix a, StridedMatrix b, double* c, std::int64_t ldc, std::int64_t m, std::int64_t n,
                    std::int64_t k, bool accumulate) {
  matrix_product(best_product_isa(), a, b, c, ldc, m, n, k, accumulate);
}

void matrix_product(ProductIsa isa, StridedMatrix a, StridedMatrix b, double* c, std::int64_t ldc, std::int64_t m,
                    std::int64_t n, std::int64_t k, bool accumulate) {
  // Every x86-64 with AVX-512F has AVX2: the sets are nested, in the enum's order.
  if (isa > best_product_isa()) {
    throw_input_error("isa", str(product_isa_name(isa), " is not supported by this CPU (it runs up to ",
                                 product_isa_name(best_product_isa()), ")"));
  }
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) {
      for (i64 i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0);
    }
    return;
  }
  const IsaKernel kernel = kernel_for(isa);
  const ProductArgs args{a, b, c, ldc, m, n, k, accumulate};
  const i64 row_tiles = (m + kernel.mr - 1) / kernel.mr, col_tiles = (n + kernel.nr - 1) / kernel.nr;
  const bool by_columns = col_tiles >= row_tiles;
  const i64 tiles = by_columns ? col_tiles : row_tiles;
  const i64 threads = m * n * k < kMinParallelWork ? 1 : std::min<i64>(reference_threads(), tiles);
  const i64 tiles_per_part = (tiles + threads - 1) / threads;
  const int parts = static_cast<int>((tiles + tiles_per_part - 1) / tiles_per_part);
  run_parts(parts, [&](int part) {
    thread_local std::vector<double> a_pack(kMC * kKC), b_pack(kNC * kKC);
    Region g{0, m, 0, n};
    const i64 unit = by_columns ? kernel.nr : kernel.mr;
    const i64 begin = part * tiles_per_part * unit, end = (part + 1) * tiles_per_part * unit;
    if (by_columns) {
      g.j0 = begin;
      g.j1 = std::min(end, n);
    } else {
      g.i0 = begin;
      g.i1 = std::min(end, m);
    }
    kernel.region(args, g, a_pack.data(), b_pack.data());
  });
}

}  // namespace dflash
