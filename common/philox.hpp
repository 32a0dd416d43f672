// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", Random123).
// A counter-based generator: the output is a pure function of (counter, key), which is what lets
// a recomputed layer regenerate exactly the dropout mask of the first forward (SPEC §6).
#pragma once

#include <cstdint>

#include "common/hd.hpp"

namespace dflash {

struct Philox4x32 {
  std::uint32_t v[4];
};
struct Philox2x32Key {
  std::uint32_t v[2];
};

namespace philox_detail {
inline constexpr std::uint32_t kMul0 = 0xD2511F53u;
inline constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kBump0 = 0x9E3779B9u;  // golden ratio
inline constexpr std::uint32_t kBump1 = 0xBB67AE85u;  // sqrt(3) - 1

DFLASH_HD inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t product = static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b);
  hi = static_cast<std::uint32_t>(product >> 32);
  lo = static_cast<std::uint32_t>(product);
}

DFLASH_HD inline Philox4x32 round(const Philox4x32& c, const Philox2x32Key& k) {
  std::uint32_t hi0, lo0, hi1, lo1;
  mulhilo(kMul0, c.v[0], hi0, lo0);
  mulhilo(kMul1, c.v[2], hi1, lo1);
  return Philox4x32{{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
}
}  // namespace philox_detail

// Ten rounds; the key is bumped between rounds (nine bumps), as in Random123's philox4x32_R(10).
DFLASH_HD inline Philox4x32 philox4x32_10(Philox4x32 counter, Philox2x32Key key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key.v[0] += philox_detail::kBump0;
      key.v[1] += philox_detail::kBump1;
    }
    counter = philox_detail::round(counter, key);
  }
  return counter;
}

DFLASH_HD inline Philox2x32Key philox_key_from_seed(std::uint64_t seed) {
  return Philox2x32Key{{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
}

}  // namespace dflash
