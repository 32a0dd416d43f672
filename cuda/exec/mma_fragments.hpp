// The register fragments of the warp-wide tensor-core instruction
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   D[16x8] = A[16x16] B[16x8] + C[16x8]
// as pure index maps (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type").
// Each of a warp's 32 lanes holds 8 elements of A (4 registers of 2 bf16), 4 of B (2 registers
// of 2 bf16) and 4 fp32 of C/D. With groupID = lane / 4 and t = lane % 4 (the lane in its quad):
//   A element i: row groupID + 8 [i in {2,3,6,7}],  col 2t + (i & 1) + 8 [i >= 4]
//   B element i: row (k) 2t + (i & 1) + 8 [i >= 2],  col (n) groupID
//   C element i: row groupID + 8 [i >= 2],           col 2t + (i & 1)
// Register j of A or B holds elements 2j (low 16 bits) and 2j + 1 (high 16 bits).
//
// So the 4 lanes of a quad hold the same two rows of C (groupID and groupID + 8): a row's
// reduction is lane-local then across the quad (shuffles with lane masks 1 and 2). And the C
// fragments of two adjacent 8-column tiles are, element for element, the A fragment of the 16
// columns they make up (accumulators_to_a_fragment): the scores a warp computes become the A
// operand of the next product without leaving its registers (FlashAttention-2).
//
// Everything here is a pure function compiled for host and device: the CPU tests check the maps
// (bijections onto the tiles, the documented entries) and the host emulator of the instruction
// (harness/cuda/host_warp_exec.hpp) gathers and scatters through them; only the instruction itself
// (cuda/exec/warp_device.cuh) is device-only.
#pragma once

#include <cstdint>

#include "common/bf16.hpp"
#include "common/hd.hpp"
#include "cuda/exec/shared_access_observer.hpp"

// Loops over register arrays are unrolled on the device, so that every index is a constant and
// the arrays stay in registers (a loop bound that is a runtime value is a guard inside).
#if defined(__CUDA_ARCH__)
#define DFLASH_UNROLL _Pragma("unroll")
#else
#define DFLASH_UNROLL
#endif

namespace dflash {

inline constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;  // D[M x N] = A[M x K] B[K x N] + C
inline constexpr int kWarpLanes = 32;
inline constexpr int kMmaAElements = 8, kMmaBElements = 4, kMmaCElements = 4;  // per lane

struct FragmentCoord {
  int row, col;
  DFLASH_HD bool operator==(const FragmentCoord& o) const { return row == o.row && col == o.col; }
};

DFLASH_HD inline int mma_group(int lane) { return lane >> 2; }
DFLASH_HD inline int mma_lane_in_quad(int lane) { return lane & 3; }

DFLASH_HD inline FragmentCoord mma_a_coord(int lane, int i) {
  return {mma_group(lane) + ((i >> 1) & 1) * 8, mma_lane_in_quad(lane) * 2 + (i & 1) + (i >> 2) * 8};
}
DFLASH_HD inline FragmentCoord mma_b_coord(int lane, int i) {
  return {mma_lane_in_quad(lane) * 2 + (i & 1) + (i >> 1) * 8, mma_group(lane)};
}
DFLASH_HD inline FragmentCoord mma_c_coord(int lane, int i) {
  return {mma_group(lane) + (i >> 1) * 8, mma_lane_in_quad(lane) * 2 + (i & 1)};
}

// Two bf16 values in one 32-bit register: `low` is the lower-indexed element.
DFLASH_HD inline std::uint32_t pack_bf16_pair(std::uint16_t low, std::uint16_t high) {
  return static_cast<std::uint32_t>(low) | (static_cast<std::uint32_t>(high) << 16);
}
DFLASH_HD inline std::uint16_t fragment_element(const std::uint32_t* regs, int i) {
  return static_cast<std::uint16_t>(regs[i >> 1] >> ((i & 1) * 16));
}

// A[m][k] = tile[m * stride + k]: a row-major 16 x 16 bf16 tile (Q rows by 16 head dims).
DFLASH_HD inline void load_a_fragment(const std::uint16_t* tile, std::int64_t stride, int lane, std::uint32_t a[4]) {
  for (int j = 0; j < 4; ++j) {
    const FragmentCoord at = mma_a_coord(lane, 2 * j);  // element 2j + 1 is the next column
    a[j] = pack_bf16_pair(DFLASH_SHARED(tile[at.row * stride + at.col]),
                          DFLASH_SHARED(tile[at.row * stride + at.col + 1]));
  }
}

// A[m][k] = tile[k * stride + m]: A transposed, i.e. 16 rows (k: query rows) of 16 values (m:
// keys), as for dK = dS^T Q with dS row-major [query rows, keys].
DFLASH_HD inline void load_a_fragment_transposed(const std::uint16_t* tile, std::int64_t stride, int lane,
                                                 std::uint32_t a[4]) {
  for (int j = 0; j < 4; ++j) {
    const FragmentCoord at = mma_a_coord(lane, 2 * j);  // element 2j + 1 is the next k
    a[j] = pack_bf16_pair(DFLASH_SHARED(tile[at.col * stride + at.row]),
                          DFLASH_SHARED(tile[(at.col + 1) * stride + at.row]));
  }
}

// B[k][n] = tile[n * stride + k]: B transposed, i.e. 8 rows (keys) of 16 values (head dims) each,
// as for S = Q K^T with K row-major.
DFLASH_HD inline void load_b_fragment_from_columns(const std::uint16_t* tile, std::int64_t stride, int lane,
                                                   std::uint32_t b[2]) {
  for (int j = 0; j < 2; ++j) {
    const FragmentCoord at = mma_b_coord(lane, 2 * j);  // element 2j + 1 is the next k
    b[j] = pack_bf16_pair(DFLASH_SHARED(tile[at.col * stride + at.row]),
                          DFLASH_SHARED(tile[at.col * stride + at.row + 1]));
  }
}

// B[k][n] = tile[k * stride + n]: 16 rows (keys) of 8 values (head dims), as for O = P V with V
// row-major.
DFLASH_HD inline void load_b_fragment_from_rows(const std::uint16_t* tile, std::int64_t stride, int lane,
                                                std::uint32_t b[2]) {
  for (int j = 0; j < 2; ++j) {
    const FragmentCoord at = mma_b_coord(lane, 2 * j);
    b[j] = pack_bf16_pair(DFLASH_SHARED(tile[at.row * stride + at.col]),
                          DFLASH_SHARED(tile[(at.row + 1) * stride + at.col]));
  }
}

// The C fragments of columns [0, 8) (`low`) and [8, 16) (`high`) of a 16 x 16 fp32 tile, rounded
// to bf16, as the A fragment of that tile: A element i is C element i & 3 of the low tile for
// i < 4 and of the high tile for i >= 4 (the maps above: same row, column + 8).
DFLASH_HD inline void accumulators_to_a_fragment(const float low[4], const float high[4], std::uint32_t a[4]) {
  a[0] = pack_bf16_pair(bf16_bits_from_float(low[0]), bf16_bits_from_float(low[1]));
  a[1] = pack_bf16_pair(bf16_bits_from_float(low[2]), bf16_bits_from_float(low[3]));
  a[2] = pack_bf16_pair(bf16_bits_from_float(high[0]), bf16_bits_from_float(high[1]));
  a[3] = pack_bf16_pair(bf16_bits_from_float(high[2]), bf16_bits_from_float(high[3]));
}

// One lane's operands of one mma: 4 A registers, 2 B registers, 4 fp32 accumulators updated in
// place (D = C).
struct MmaOperands {
  const std::uint32_t* a;
  const std::uint32_t* b;
  float* c;
};

}  // namespace dflash
