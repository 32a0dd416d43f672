// How bf16 tensors are typed in host code: their raw bits. Host code never does arithmetic on
// them; it rounds with common/bf16.hpp going in and widens to float coming out, exactly as the
// kernels do, so host and device agree bit for bit on what a bf16 value is.
#pragma once

#include <cstdint>
#include <vector>

#include "common/bf16.hpp"
#include "reference/threads.hpp"

namespace dflash {

using Bf16Bits = std::uint16_t;

// x[0, n) as bf16 bits, each value rounded once from its float (nearest even): how every upload
// of a double tensor (the reference's values) reaches a bf16 buffer. Split over the reference's
// threads (DFLASH_THREADS; each value is its own output, so the bits do not depend on the count):
// a full-scale sequence's features are 10^8 values.
// bf16_bits_into writes them into `bits` (resized to n), so that a caller can keep one buffer for
// many uploads.
inline void bf16_bits_into(const double* x, std::int64_t n, std::vector<Bf16Bits>& bits) {
  bits.resize(static_cast<std::size_t>(n));
  run_row_ranges(n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) bits[std::size_t(e)] = bf16_bits_from_float(static_cast<float>(x[e]));
  });
}
inline std::vector<Bf16Bits> bf16_bits_of(const double* x, std::int64_t n) {
  std::vector<Bf16Bits> bits;
  bf16_bits_into(x, n, bits);
  return bits;
}

}  // namespace dflash
