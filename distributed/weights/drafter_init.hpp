// The seeded initialisation of a drafter trained from scratch (TRAINING §16): norm weights 1;
// element e of the p-th matrix in canonical order (p = 0 for fc.weight, then each layer's q, k, v,
// o, gate, up, down projections) is the Box–Muller normal
//   0.02 sqrt(-2 ln u1) cos(2 pi u2),   u_k = (word_k + 0.5) / 2^32,
// words 0 and 1 of Philox(counter = (lo32(e), hi32(e), 0xFFFFE, p), key = (lo32(seed), hi32(seed))).
// A pure function of (seed, p, e): the same weights on every backend and world size.
#pragma once

#include <cstdint>
#include <span>

#include "reference/drafter_parameters.hpp"

namespace dflash {

inline constexpr std::uint32_t kInitStream = 0xFFFFEu;
inline constexpr double kInitStandardDeviation = 0.02;

// The value above for element e of matrix p.
double initial_matrix_element(std::uint64_t seed, std::uint32_t matrix, std::uint64_t element);

DrafterParameters<double> seeded_drafter_parameters(MemoryTracker& tracker, const DrafterConfig& config,
                                                    std::uint64_t seed);

// Elements [first, first + out.size()) of the same parameters as one flat vector (every parameter
// in canonical order, P values; elements at or past P are 0, ZeRO-1's padding), computed for that
// range alone: a rank that keeps only its optimizer part draws its 3 P / R values' worth, not P
// (13.8 GB and about a minute of Box–Muller on every rank at full scale).
void seeded_flat_values(const DrafterConfig& config, std::uint64_t seed, std::int64_t first, std::span<double> out);

}  // namespace dflash
