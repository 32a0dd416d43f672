// The CPU backend of the trunk (cuda/trunk/layer.hpp, cuda/trunk/stack.hpp): the kernels' own bodies
// and block programs run by host loops over their grids (harness/cuda/host_block_exec.hpp), and
// the linear layers as plain fp32 sums of Storage operands in index order (the plain computation
// cuBLAS is held to). Buffers are counted by a MemoryTracker like the device allocator's, and
// filled with NaN bytes when made, as device memory is not initialised: a read of a value no
// pass wrote shows up in the results.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/attention/simt_program.hpp"
#include "cuda/attention/tensor_core_backward_program.hpp"
#include "cuda/attention/tensor_core_program.hpp"
#include "cuda/trunk/elementwise_program.hpp"
#include "harness/cuda/host_block_exec.hpp"
#include "harness/cuda/host_warp_exec.hpp"
#include "reference/memory_tracker.hpp"
#include "reference/tensor.hpp"

namespace dflash {

template <class T>
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(MemoryTracker& tracker, MemoryCategory category, std::size_t n)
      : values_(tracker, category, {static_cast<std::int64_t>(n)}) {
    if (n > 0) std::memset(static_cast<void*>(values_.data()), 0xFF, n * sizeof(T));
  }
  T* data() { return values_.data(); }
  const T* data() const { return values_.data(); }
  std::size_t size() const { return static_cast<std::size_t>(values_.numel()); }
  void zero() {
    for (std::int64_t e = 0; e < values_.numel(); ++e) values_[e] = T(0);
  }
  void release() { values_.release(); }
  void recategorize(MemoryCategory category) { values_.recategorize(category); }

 private:
  Tensor<T> values_;
};

// What every CPU backend (the trunk's here, the loss head's, the training step's) does with
// memory, as DeviceMemory on the GPU: makes buffers counted by `tracker`, fills them from and reads
// them back to the host, reads one element, copies bytes.
struct HostMemory {
  template <class T>
  using Buffer = HostBuffer<T>;

  MemoryTracker& tracker;

  template <class T>
  Buffer<T> buffer(MemoryCategory category, std::size_t n) const {
    return Buffer<T>(tracker, category, n);
  }
  template <class T>
  Buffer<T> from_host(MemoryCategory category, std::span<const T> values) const {
    Buffer<T> b(tracker, category, values.size());
    std::copy(values.begin(), values.end(), b.data());
    return b;
  }
  template <class T>
  Buffer<T> from_host(MemoryCategory category, const std::vector<T>& values) const {
    return from_host(category, std::span<const T>(values));
  }
  template <class T>
  std::vector<T> to_host(const Buffer<T>& b) const {
    return std::vector<T>(b.data(), b.data() + b.size());
  }
  template <class T>
  T element(const T* array, std::int64_t index) const {
    return array[index];
  }
  void copy(void* to, const void* from, std::size_t bytes) const {
    if (bytes > 0) std::memmove(to, from, bytes);
  }
};

template <class StorageT>
struct HostBackend : HostMemory {
  using Storage = StorageT;
  // As CudaBackend's switch, but the CUDA-core forward by default: this backend with bf16 storage
  // is the plain computation (SPEC §10) the step is judged by. tensor_cores_where_supported runs
  // the tensor-core forward's program with the mma emulated.
  AttentionForwardKernel attention_forward_kernel = AttentionForwardKernel::cuda_cores;
  // The same for the backward: tensor_cores_where_supported runs the tensor-core backward's
  // programs with the mma emulated.
  AttentionBackwardKernel attention_backward_kernel = AttentionBackwardKernel::cuda_cores;
  // The CUDA-core backward as the plain computation of the tensor-core one: f P and dS rounded to
  // bf16 (AttentionProblem::round_product_operands_to_bf16), on the shapes the tensor-core backward
  // supports (attention_backward_uses_tensor_cores); other shapes run on CUDA cores on the device
  // too, with fp32 operands.
  bool round_attention_product_operands = false;
  // The same for the CUDA-core forward as the plain computation of the tensor-core one: f P rounded
  // to bf16 where it becomes the operand of O += (fP) V, on the shapes the tensor-core forward
  // supports (attention_forward_uses_tensor_cores).
  bool round_attention_forward_operands = false;

  void narrow(const float* x, std::int64_t n, Storage* y) const {
    for (std::int64_t e = 0; e < n; ++e) narrow_at(e, x, y);
  }
  void embedding_gather(const std::int64_t* tokens, const Storage* table, std::int64_t T, std::int64_t H,
                        float* x) const {
    for (std::int64_t e = 0; e < T * H; ++e) embedding_gather_at(e, H, tokens, table, x);
  }
  void rms_norm_forward(const float* x, const float* w, std::int64_t rows, std::int64_t H, float eps, Storage* y,
                        float* rstd) const {
    run_grid_on_host(rows, rms_norm_row_shared_bytes(kNormRowThreads), kNormRowThreads, false,
                     [&](HostBlockExec& exec, unsigned char* shared, std::int64_t row) {
                       rms_norm_forward_block(exec, x, w, H, eps, y, rstd, shared, row);
                     });
  }
  void rms_norm_backward(const float* x, const float* w, const float* rstd, const float* dy, std::int64_t rows,
                         std::int64_t H, float* dx) const {
    run_grid_on_host(rows, rms_norm_row_shared_bytes(kNormRowThreads), kNormRowThreads, false,
                     [&](HostBlockExec& exec, unsigned char* shared, std::int64_t row) {
                       rms_norm_backward_block(exec, x, w, rstd, dy, H, dx, shared, row);
                     });
  }
  void rms_norm_weight_grad(const float* x, const float* rstd, const float* dy, std::int64_t rows, std::int64_t n,
                            float* dw) const {
    run_grid_on_host(rms_norm_weight_grad_blocks(n), rms_norm_weight_grad_shared_bytes(kNormWeightGradThreads),
                     kNormWeightGradThreads, false,
                     [&](HostBlockExec& exec, unsigned char* shared, std::int64_t group) {
                       rms_norm_weight_grad_block(exec, x, rstd, dy, rows, n, dw, shared, group);
                     });
  }
  void head_norm_rope_forward(const float* proj, const float* w, std::int64_t rows, std::int64_t heads, std::int64_t d,
                              float eps, const std::int64_t* positions, double theta, Storage* out, float* rstd) const {
    for (std::int64_t rh = 0; rh < rows * heads; ++rh) {
      head_norm_rope_forward_at(rh, proj, w, heads, d, eps, positions, theta, out, rstd);
    }
  }
  void head_norm_rope_backward(float* d_out, const float* proj, const float* w, const float* rstd, std::int64_t rows,
                               std::int64_t heads, std::int64_t d, const std::int64_t* positions, double theta,
                               float* d_proj) const {
    for (std::int64_t rh = 0; rh < rows * heads; ++rh) {
      head_norm_rope_backward_at(rh, d_out, proj, w, rstd, heads, d, positions, theta, d_proj);
    }
  }
  void swiglu_forward(const Storage* gate, const Storage* up, std::int64_t n, Storage* act) const {
    for (std::int64_t e = 0; e < n; ++e) swiglu_forward_at(e, gate, up, act);
  }
  void swiglu_backward(const Storage* gate, const Storage* up, const float* d_act, std::int64_t n, float* d_gate,
                       float* d_up) const {
    for (std::int64_t e = 0; e < n; ++e) swiglu_backward_at(e, gate, up, d_act, d_gate, d_up);
  }
  void residual_dropout_forward(const float* x, const float* branch, std::int64_t n, const DropoutSiteView& dropout,
                                float* out) const {
    for (std::int64_t e = 0; e < n; ++e) residual_dropout_forward_at(e, x, branch, dropout, out);
  }
  void residual_dropout_backward(const float* d_out, std::int64_t n, const DropoutSiteView& dropout,
                                 float* d_branch) const {
    for (std::int64_t e = 0; e < n; ++e) residual_dropout_backward_at(e, d_out, dropout, d_branch);
  }
  void attention_forward(const AttentionProblem& pb, const AttentionOperands<Storage>& in,
                         const AttentionForwardOutputs<Storage>& out) const {
    if constexpr (std::is_same_v<Storage, Bf16Bits>) {
      if (attention_forward_kernel == AttentionForwardKernel::tensor_cores_where_supported &&
          attention_forward_uses_tensor_cores<Storage>(pb.tiling)) {
        run_grid_on_host<HostWarpExec>(pb.tiling.query_tiles(), attention_forward_tc_shared_bytes(pb.tiling),
                                       tc_forward_threads(pb.tiling), false,
                                       [&](HostWarpExec& exec, unsigned char* shared, std::int64_t b) {
                                         attention_forward_tc_block(exec, pb, in, out, shared, b);
                                       });
        return;
      }
    }
    AttentionProblem plain = pb;
    plain.round_product_operands_to_bf16 =
        round_attention_forward_operands && attention_forward_uses_tensor_cores<Storage>(pb.tiling);
    run_grid_on_host(pb.tiling.query_tiles(), attention_forward_shared_bytes<Storage>(pb.tiling), kAttentionThreads,
                     false, [&](HostBlockExec& exec, unsigned char* shared, std::int64_t b) {
                       attention_forward_block(exec, plain, in, out, shared, b);
                     });
  }
  void attention_backward(const AttentionProblem& pb, const AttentionOperands<Storage>& in,
                          const AttentionGradients& grads) const {
    if constexpr (std::is_same_v<Storage, Bf16Bits>) {
      if (attention_backward_kernel == AttentionBackwardKernel::tensor_cores_where_supported &&
          attention_backward_uses_tensor_cores<Storage>(pb.tiling)) {
        const int threads = tc_forward_threads(pb.tiling);
        run_grid_on_host<HostWarpExec>(pb.tiling.query_tiles(), attention_dq_tc_shared_bytes(pb.tiling), threads, false,
                                       [&](HostWarpExec& exec, unsigned char* shared, std::int64_t b) {
                                         attention_dq_tc_block(exec, pb, in, grads, shared, b);
                                       });
        run_grid_on_host<HostWarpExec>(pb.tiling.context_tiles() * pb.tiling.nkv,
                                       attention_dkv_tc_shared_bytes(pb.tiling), threads, false,
                                       [&](HostWarpExec& exec, unsigned char* shared, std::int64_t b) {
                                         attention_dkv_tc_block(exec, pb, in, grads, shared, b);
                                       });
        return;
      }
    }
    AttentionProblem plain = pb;
    plain.round_product_operands_to_bf16 =
        round_attention_product_operands && attention_backward_uses_tensor_cores<Storage>(pb.tiling);
    run_grid_on_host(pb.tiling.query_tiles(), attention_dq_shared_bytes<Storage>(pb.tiling), kAttentionThreads, false,
                     [&](HostBlockExec& exec, unsigned char* shared, std::int64_t b) {
                       attention_dq_block(exec, plain, in, grads, shared, b);
                     });
    run_grid_on_host(pb.tiling.context_tiles() * pb.tiling.nkv, attention_dkv_shared_bytes<Storage>(pb.tiling),
                     kAttentionThreads, false, [&](HostBlockExec& exec, unsigned char* shared, std::int64_t b) {
                       attention_dkv_block(exec, plain, in, grads, shared, b);
                     });
  }
  // y[r, o] = sum_i x[r, i] w[o, i]
  template <class Out>
  void linear_forward(const Storage* x, const Storage* w, Out* y, std::int64_t rows, std::int64_t out,
                      std::int64_t in) const {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t o = 0; o < out; ++o) {
        float s = 0.0f;
        for (std::int64_t i = 0; i < in; ++i) s += widen(x[r * in + i]) * widen(w[o * in + i]);
        narrow_into(s, y[r * out + o]);
      }
    }
  }
  // dx[r, i] (+)= sum_o dy[r, o] w[o, i]
  void linear_input_grad(const Storage* dy, const Storage* w, float* dx, std::int64_t rows, std::int64_t out,
                         std::int64_t in, bool accumulate) const {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t i = 0; i < in; ++i) {
        float s = 0.0f;
        for (std::int64_t o = 0; o < out; ++o) s += widen(dy[r * out + o]) * widen(w[o * in + i]);
        dx[r * in + i] = accumulate ? dx[r * in + i] + s : s;
      }
    }
  }
  // dw[o, i] += sum_r dy[r, o] x[r, i]
  void linear_weight_grad(const Storage* dy, const Storage* x, float* dw, std::int64_t rows, std::int64_t out,
                          std::int64_t in) const {
    for (std::int64_t o = 0; o < out; ++o) {
      for (std::int64_t i = 0; i < in; ++i) {
        float s = 0.0f;
        for (std::int64_t r = 0; r < rows; ++r) s += widen(dy[r * out + o]) * widen(x[r * in + i]);
        dw[o * in + i] += s;
      }
    }
  }
};

}  // namespace dflash
