// Launchers of the optimizer step's kernels (bodies: cuda/optimizer/adamw_program.hpp). Device pointers
// throughout: fp32 gradient, master weights and moments, bf16 (bits) working copy. Each launcher
// checks its sizes and throws std::invalid_argument naming the bad one.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda/optimizer/adamw_program.hpp"

namespace dflash {

// First pass of the squared norm of g[0, n): partials[norm_blocks(n)] (device doubles).
void launch_squared_norm_partials(const float* g, std::int64_t n, double* partials, cudaStream_t stream);
// Second pass: *norm2 = the partials summed in block order (one device double).
void launch_squared_norm_finish(const double* partials, std::int64_t blocks, double* norm2, cudaStream_t stream);

// One AdamW step over range.theta/m/v/g[0, end - begin) (range.table on the device).
void launch_adamw_step(const AdamWRange& range, cudaStream_t stream);

// working[0, n) = bf16 rounding of master[0, n).
void launch_bf16_copy(const float* master, std::int64_t n, std::uint16_t* working, cudaStream_t stream);

}  // namespace dflash
