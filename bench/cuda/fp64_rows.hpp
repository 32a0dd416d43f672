// The benchmark's full-scale correctness gate, device side: a few rows of the loss head recomputed
// in fp64 from the same bf16 inputs (Y, G, W_lm on the device), independently of cuBLAS and of the
// loss head's kernels. Deterministic: fixed reduction orders, no atomics.
#pragma once

#include <cstdint>

#include "cuda/runtime/bf16_bits.hpp"

namespace dflash {

// z[j, v] = sum_h Y[rows[j], h] W[v, h] and t[j, v] = sum_h G[rows[j], h] W[v, h] in double, for
// j < n (n <= kFp64MaxRows); z, t: [n, V] doubles on the device; rows: n indices on the device.
inline constexpr int kFp64MaxRows = 32;
void fp64_row_logits(const Bf16Bits* hidden, const Bf16Bits* teacher_hidden, const Bf16Bits* lm_head,
                     const std::int64_t* rows, int n, std::int64_t vocab, std::int64_t hidden_size, double* z,
                     double* t);

// dy[j, h] = sum_v dz[j, v] W[v, h] in double for j < n (n <= kFp64MaxRows): dz [n, V] and dy
// [n, H] doubles on the device. The sum over v runs in kFp64Segments fixed segments, added in order.
inline constexpr int kFp64Segments = 64;
void fp64_rows_times_head(const double* dz, const Bf16Bits* lm_head, int n, std::int64_t vocab,
                          std::int64_t hidden_size, double* dy);

}  // namespace dflash
