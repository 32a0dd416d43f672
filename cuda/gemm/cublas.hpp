// The loss head's two matrix products on cuBLAS, bf16 operands with fp32 accumulation:
//   logits      Z[r,V] = X[r,H] W[V,H]^T   (bf16 out: a chunk of student or teacher logits)
//   input grad  dX[r,H] = dZ[r,V] W[V,H]   (fp32 out: dL/dY)
// Row-major here is column-major transposed for cuBLAS: Z^T = W^T-as-stored(op T) X^T (a "TN"
// product, the layout cuBLAS runs fastest), dX^T = W^T dZ^T ("NN"). The handle runs on the
// allocator's stream with a workspace the allocator counts (transient), so cuBLAS takes no
// device memory of its own.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>

#include "cuda/runtime/bf16_bits.hpp"
#include "cuda/runtime/device_allocator.hpp"
#include "cuda/runtime/device_buffer.hpp"

namespace dflash {

// A cuBLAS handle on `stream` whose only device memory is the caller's (allocator-counted)
// workspace, kGemmMathMode (cublas_call.hpp: no TF32, no reduction in bf16), host scalars. Every cuBLAS user
// of the project (the loss head, the trunk's linear layers) takes its handle from here.
// Throws std::logic_error when the workspace is not kCublasWorkspaceAlignment-aligned.
cublasHandle_t create_cublas_handle(cudaStream_t stream, void* workspace, std::size_t workspace_bytes);
inline constexpr std::size_t kCublasWorkspaceAlignment = 256;

struct GemmCall;
// The call's product (cuda/gemm/cublas_call.hpp) as one cublasGemmEx per gemm_calls_within_span
// slice (the call itself while every operand spans under 2^31 elements), alpha 1, fp32 compute.
void run_gemm_call(cublasHandle_t handle, const GemmCall& g);

class CublasGemm {
 public:
  static constexpr std::size_t kDefaultWorkspaceBytes = std::size_t(32) << 20;  // what cuBLAS asks for on Hopper

  explicit CublasGemm(DeviceAllocator& allocator, std::size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // z[rows, vocab] = x[rows, hidden] w[vocab, hidden]^T
  void logits(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* z, std::int64_t rows, std::int64_t vocab,
              std::int64_t hidden);
  // dx[rows, hidden] = dz[rows, vocab] w[vocab, hidden]
  void input_grad(const Bf16Bits* dz, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t vocab,
                  std::int64_t hidden);

  std::size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer<unsigned char> workspace_;
};

// 2 m n k: the floating-point operations of one product (the benchmark's rate).
inline double gemm_flops(std::int64_t m, std::int64_t n, std::int64_t k) {
  return 2.0 * double(m) * double(n) * double(k);
}

}  // namespace dflash
