// The GPU backend of the trunk (cuda/trunk/layer.hpp, cuda/trunk/stack.hpp): bf16 storage, buffers
// from the DeviceAllocator, the CUDA kernels and cuBLAS, all on the allocator's stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/attention/kernels.hpp"
#include "cuda/gemm/linear.hpp"
#include "cuda/runtime/bf16_bits.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/trunk/elementwise_kernels.hpp"

namespace dflash {

struct CudaBackend : DeviceMemory {
  using Storage = Bf16Bits;

  LinearGemm& gemm;
  AttentionForwardKernel attention_forward_kernel = kDrafterStepAttentionForward;
  AttentionBackwardKernel attention_backward_kernel = kDrafterStepAttentionBackward;

  void narrow(const float* x, std::int64_t n, Storage* y) const { launch_narrow(x, n, y, stream()); }
  void embedding_gather(const std::int64_t* tokens, const Storage* table, std::int64_t T, std::int64_t H,
                        float* x) const {
    launch_embedding_gather(tokens, table, T, H, x, stream());
  }
  void rms_norm_forward(const float* x, const float* w, std::int64_t rows, std::int64_t H, float eps, Storage* y,
                        float* rstd) const {
    launch_rms_norm_forward(x, w, rows, H, eps, y, rstd, stream());
  }
  void rms_norm_backward(const float* x, const float* w, const float* rstd, const float* dy, std::int64_t rows,
                         std::int64_t H, float* dx) const {
    launch_rms_norm_backward(x, w, rstd, dy, rows, H, dx, stream());
  }
  void rms_norm_weight_grad(const float* x, const float* rstd, const float* dy, std::int64_t rows, std::int64_t n,
                            float* dw) const {
    launch_rms_norm_weight_grad(x, rstd, dy, rows, n, dw, stream());
  }
  void head_norm_rope_forward(const float* proj, const float* w, std::int64_t rows, std::int64_t heads, std::int64_t d,
                              float eps, const std::int64_t* positions, double theta, Storage* out, float* rstd) const {
    launch_head_norm_rope_forward(proj, w, rows, heads, d, eps, positions, theta, out, rstd, stream());
  }
  void head_norm_rope_backward(float* d_out, const float* proj, const float* w, const float* rstd, std::int64_t rows,
                               std::int64_t heads, std::int64_t d, const std::int64_t* positions, double theta,
                               float* d_proj) const {
    launch_head_norm_rope_backward(d_out, proj, w, rstd, rows, heads, d, positions, theta, d_proj, stream());
  }
  void swiglu_forward(const Storage* gate, const Storage* up, std::int64_t n, Storage* act) const {
    launch_swiglu_forward(gate, up, n, act, stream());
  }
  void swiglu_backward(const Storage* gate, const Storage* up, const float* d_act, std::int64_t n, float* d_gate,
                       float* d_up) const {
    launch_swiglu_backward(gate, up, d_act, n, d_gate, d_up, stream());
  }
  void residual_dropout_forward(const float* x, const float* branch, std::int64_t n, const DropoutSiteView& dropout,
                                float* out) const {
    launch_residual_dropout_forward(x, branch, n, dropout, out, stream());
  }
  void residual_dropout_backward(const float* d_out, std::int64_t n, const DropoutSiteView& dropout,
                                 float* d_branch) const {
    launch_residual_dropout_backward(d_out, n, dropout, d_branch, stream());
  }
  void attention_forward(const AttentionProblem& pb, const AttentionOperands<Storage>& in,
                         const AttentionForwardOutputs<Storage>& out) const {
    launch_attention_forward(pb, in, out, stream(), attention_forward_kernel);
  }
  void attention_backward(const AttentionProblem& pb, const AttentionOperands<Storage>& in,
                          const AttentionGradients& grads) const {
    launch_attention_backward(pb, in, grads, stream(), attention_backward_kernel);
  }
  template <class Out>
  void linear_forward(const Storage* x, const Storage* w, Out* y, std::int64_t rows, std::int64_t out,
                      std::int64_t in) const {
    gemm.forward(x, w, y, rows, out, in);
  }
  void linear_input_grad(const Storage* dy, const Storage* w, float* dx, std::int64_t rows, std::int64_t out,
                         std::int64_t in, bool accumulate) const {
    gemm.input_grad(dy, w, dx, rows, out, in, accumulate);
  }
  void linear_weight_grad(const Storage* dy, const Storage* x, float* dw, std::int64_t rows, std::int64_t out,
                          std::int64_t in) const {
    gemm.weight_grad(dy, x, dw, rows, out, in);
  }
};

}  // namespace dflash
