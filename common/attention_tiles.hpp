// The tile schedule of the DFlash attention kernels (DESIGN-NOTES: "structure a kernel can
// exploit"). Everything here is a pure function of the shapes and the mask, shared by the CUDA
// kernels and the CPU drivers that test them.
//
//   query tile q = (n, g), n = q / nkv, g = q % nkv: the B rows of block n for each of kv head
//     g's nh/nkv query heads, R = (nh/nkv) B rows; row r is head g (nh/nkv) + r / B, token k = r % B.
//     All R rows share every key and value tile.
//   context key tile t: keys [t KT, min((t+1) KT, S)).
//   block key tile of block n: keys S + [n B, (n+1) B).
// Query tile (n, g) visits the context tiles that meet [context_begin(n), a_n) -- keys below its
// anchor and, on sliding layers, inside the k = 0 row's window -- then its own block tile; a
// block with kappa_n = 0 visits nothing. Every other tile is skipped without being computed.
// The dK/dV kernel of context tile t visits, in ascending n, exactly the query tiles whose
// context range contains t: the same function decides both sides.
#pragma once

#include <cstdint>

#include "common/attention_mask.hpp"
#include "common/hd.hpp"

namespace dflash {

struct AttentionTiling {
  std::int64_t S = 0, N = 0, B = 0;  // context keys, blocks, block size
  std::int64_t nh = 0, nkv = 0, d = 0;
  std::int64_t key_tile = 0;  // KT: context keys per tile

  DFLASH_HD std::int64_t T() const { return N * B; }
  DFLASH_HD std::int64_t group() const { return nh / nkv; }          // query heads per kv head
  DFLASH_HD std::int64_t query_rows() const { return group() * B; }  // R
  DFLASH_HD std::int64_t query_tiles() const { return N * nkv; }
  DFLASH_HD std::int64_t context_tiles() const { return (S + key_tile - 1) / key_tile; }
  DFLASH_HD std::int64_t max_tile_keys() const { return key_tile > B ? key_tile : B; }  // smem key rows

  // Row r of query tile (n, g): its head and its token k in block n.
  DFLASH_HD std::int64_t row_head(std::int64_t g, std::int64_t r) const { return g * group() + r / B; }
  DFLASH_HD std::int64_t row_token(std::int64_t r) const { return r % B; }
};

// Why the kernels cannot run this tiling (the field and the rule it breaks), or nullptr.
inline const char* attention_tiling_problem(const AttentionTiling& t) {
  if (t.S < 0) return "S (context keys) must be >= 0";
  if (t.N < 1) return "N (blocks) must be >= 1";
  if (t.B < 1) return "B (block size) must be >= 1";
  if (t.nkv < 1) return "nkv (kv heads) must be >= 1";
  if (t.nh < t.nkv || t.nh % t.nkv != 0) return "nh (query heads) must be a positive multiple of nkv";
  if (t.d < 1) return "d (head dim) must be >= 1";
  if (t.key_tile < 1) return "key_tile must be >= 1";
  return nullptr;
}

// A run of keys [first, first + count) in [context; block] key space.
struct KeyTile {
  std::int64_t first = 0;
  std::int64_t count = 0;
  bool is_block = false;
};

struct TileRange {
  std::int64_t begin = 0, end = 0;
  DFLASH_HD bool contains(std::int64_t t) const { return begin <= t && t < end; }
};

// The context tiles query tile (n, *) visits: those meeting [context_begin(n), a_n).
DFLASH_HD inline TileRange context_tiles_of_block(const AttentionTiling& tiling, const AttentionMaskView& mask,
                                                  std::int64_t n) {
  const std::int64_t end_key = mask.context_end(n);
  const std::int64_t begin_key = mask.context_begin(n);
  if (end_key <= begin_key) return TileRange{};
  return TileRange{begin_key / tiling.key_tile, (end_key + tiling.key_tile - 1) / tiling.key_tile};
}

DFLASH_HD inline KeyTile context_key_tile(const AttentionTiling& tiling, std::int64_t t) {
  const std::int64_t first = t * tiling.key_tile;
  const std::int64_t rest = tiling.S - first;
  return KeyTile{first, rest < tiling.key_tile ? rest : tiling.key_tile, false};
}

DFLASH_HD inline KeyTile block_key_tile(const AttentionTiling& tiling, std::int64_t n) {
  return KeyTile{tiling.S + n * tiling.B, tiling.B, true};
}

// The key tiles query tile (n, *) visits, in order: its context tiles ascending, then its block
// tile (none at all when kappa_n = 0).
DFLASH_HD inline std::int64_t query_tile_steps(const AttentionTiling& tiling, const AttentionMaskView& mask,
                                               std::int64_t n) {
  if (mask.keep[n] == 0) return 0;
  const TileRange r = context_tiles_of_block(tiling, mask, n);
  return (r.end - r.begin) + 1;
}
DFLASH_HD inline KeyTile query_tile_step(const AttentionTiling& tiling, const AttentionMaskView& mask, std::int64_t n,
                                         std::int64_t step) {
  const TileRange r = context_tiles_of_block(tiling, mask, n);
  return step < r.end - r.begin ? context_key_tile(tiling, r.begin + step) : block_key_tile(tiling, n);
}

}  // namespace dflash
