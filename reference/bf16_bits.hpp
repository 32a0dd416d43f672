// How bf16 values are held in host code: their raw bits. Host code never does arithmetic on them;
// it rounds with common/bf16.hpp going in and widens coming out, exactly as the kernels do, so
// host and device agree bit for bit on what a bf16 value is. The CUDA step uploads them; the
// trainer keeps a CUDA step's sequences in them until each one's turn (distributed/train_step.hpp).
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
// bf16_bits_into writes them into `bits` (resized to n, so that a caller can keep one buffer for
// many uploads) or into bits[0, n).
inline void bf16_bits_into(const double* x, std::int64_t n, Bf16Bits* bits) {
  run_row_ranges(n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) bits[e] = bf16_bits_from_float(static_cast<float>(x[e]));
  });
}
inline void bf16_bits_into(const double* x, std::int64_t n, std::vector<Bf16Bits>& bits) {
  bits.resize(static_cast<std::size_t>(n));
  bf16_bits_into(x, n, bits.data());
}
inline std::vector<Bf16Bits> bf16_bits_of(const double* x, std::int64_t n) {
  std::vector<Bf16Bits> bits;
  bf16_bits_into(x, n, bits);
  return bits;
}

// The index of the first of bits[0, n) that is not a finite bf16 (exponent bits all ones: ±inf, NaN),
// or -1.
inline std::int64_t first_non_finite_bf16(const Bf16Bits* bits, std::int64_t n) {
  for (std::int64_t e = 0; e < n; ++e) {
    if ((bits[e] & 0x7F80u) == 0x7F80u) return e;
  }
  return -1;
}

// bits[0, n) widened to double into out[0, n) (exact: every bf16 value is a double), split as
// bf16_bits_into is. bf16_bits_into of the result gives the bits back.
inline void doubles_from_bf16_bits(const Bf16Bits* bits, std::int64_t n, double* out) {
  run_row_ranges(n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) out[e] = static_cast<double>(float_from_bf16_bits(bits[e]));
  });
}

}  // namespace dflash
