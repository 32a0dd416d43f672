// The trunk's linear layers on cuBLAS (SPEC §3: every projection, no biases), bf16 operands with
// fp32 accumulation, row-major:
//   forward       y[M, out] = x[M, in] W[out, in]^T        (fp32 or bf16 out)
//   input grad    dx[M, in] (+)= dy[M, out] W[out, in]      (fp32 out; beta 1 accumulates)
//   weight grad   dW[out, in] += dy[M, out]^T x[M, in]       (fp32, always accumulated)
// Column-major, as cuBLAS sees row-major data: y^T = W^T-stored (op T) x^T ("TN"), dx^T = W^T dy^T
// ("NN"), dW^T = x^T (op N) dy (op T) ("NT"); the arguments of each call come from
// cuda/gemm/cublas_call.hpp (checked on the CPU against a textbook GEMM). Its own handle on the allocator's stream, with a
// workspace the allocator counts (transient) for the object's lifetime.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>

#include "cuda/runtime/bf16_bits.hpp"
#include "cuda/runtime/device_allocator.hpp"
#include "cuda/runtime/device_buffer.hpp"

namespace dflash {

class LinearGemm {
 public:
  static constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;

  explicit LinearGemm(DeviceAllocator& allocator);
  ~LinearGemm();
  LinearGemm(const LinearGemm&) = delete;
  LinearGemm& operator=(const LinearGemm&) = delete;

  void forward(const Bf16Bits* x, const Bf16Bits* w, float* y, std::int64_t rows, std::int64_t out, std::int64_t in);
  void forward(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* y, std::int64_t rows, std::int64_t out, std::int64_t in);
  void input_grad(const Bf16Bits* dy, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t out,
                  std::int64_t in, bool accumulate);
  void weight_grad(const Bf16Bits* dy, const Bf16Bits* x, float* dw, std::int64_t rows, std::int64_t out,
                   std::int64_t in);

  // FLOPs of the three products (2 M out in each): what the benchmark's model-FLOP count sums.
  static double flops(std::int64_t rows, std::int64_t out, std::int64_t in) {
    return 2.0 * double(rows) * double(out) * double(in);
  }

 private:
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer<unsigned char> workspace_;
};

}  // namespace dflash
