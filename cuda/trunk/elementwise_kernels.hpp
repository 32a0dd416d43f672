// Launchers of the trunk's elementwise and per-row kernels (bodies: cuda/trunk/elementwise_program.hpp).
// Device pointers throughout; fp32 residual stream, statistics and gradients; Storage is bf16
// bits (production) or float (tests). Each launcher checks its shapes and throws
// std::invalid_argument naming the bad one.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/dropout_site_view.hpp"

namespace dflash {

// y = x rounded to Storage (round to nearest even for bf16).
template <class Storage>
void launch_narrow(const float* x, std::int64_t n, Storage* y, cudaStream_t stream);

// x[i, :] = E[tokens[i], :] (x fp32 [T, H]); the caller has checked tokens < V.
template <class Storage>
void launch_embedding_gather(const std::int64_t* tokens, const Storage* table, std::int64_t T, std::int64_t H, float* x,
                             cudaStream_t stream);

// y = RMSNorm(x; w) per row of H; rstd [rows].
template <class Storage>
void launch_rms_norm_forward(const float* x, const float* w, std::int64_t rows, std::int64_t H, float eps, Storage* y,
                             float* rstd, cudaStream_t stream);
// dx += the input gradient of RMSNorm per row.
void launch_rms_norm_backward(const float* x, const float* w, const float* rstd, const float* dy, std::int64_t rows,
                              std::int64_t H, float* dx, cudaStream_t stream);
// dw[c] += sum_r dy[r, c] x[r, c] rstd[r] (rows ascending; x, dy [rows, n]).
void launch_rms_norm_weight_grad(const float* x, const float* rstd, const float* dy, std::int64_t rows, std::int64_t n,
                                 float* dw, cudaStream_t stream);

// out = RoPE(RMSNorm_d(proj; w)) per (row, head); rstd [rows, heads]; positions [rows].
template <class Storage>
void launch_head_norm_rope_forward(const float* proj, const float* w, std::int64_t rows, std::int64_t heads,
                                   std::int64_t d, float eps, const std::int64_t* positions, double theta, Storage* out,
                                   float* rstd, cudaStream_t stream);
// d_out is rotated back in place; d_proj = the input gradient (then launch_rms_norm_weight_grad
// on (proj, rstd, d_out) as [rows heads, d] gives the weight's).
void launch_head_norm_rope_backward(float* d_out, const float* proj, const float* w, const float* rstd,
                                    std::int64_t rows, std::int64_t heads, std::int64_t d,
                                    const std::int64_t* positions, double theta, float* d_proj, cudaStream_t stream);

template <class Storage>
void launch_swiglu_forward(const Storage* gate, const Storage* up, std::int64_t n, Storage* act, cudaStream_t stream);
template <class Storage>
void launch_swiglu_backward(const Storage* gate, const Storage* up, const float* d_act, std::int64_t n, float* d_gate,
                            float* d_up, cudaStream_t stream);

// out = x + dropout(branch); d_branch = dropout(d_out) (element index i H + c).
void launch_residual_dropout_forward(const float* x, const float* branch, std::int64_t n,
                                     const DropoutSiteView& dropout, float* out, cudaStream_t stream);
void launch_residual_dropout_backward(const float* d_out, std::int64_t n, const DropoutSiteView& dropout,
                                      float* d_branch, cudaStream_t stream);

}  // namespace dflash
