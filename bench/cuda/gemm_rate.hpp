// The card's sustained bf16 matrix rate and device-side timing, shared by the CUDA benchmarks
// (the loss head's and the whole drafter step's): MFU is a rate over this measured one.
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "cuda/gemm/cublas.hpp"
#include "cuda/runtime/check.hpp"
#include "cuda/runtime/device_allocator.hpp"

namespace dflash {

// How long the card-rate product is timed for, at least: a sustained rate, not a burst at boost
// clocks.
inline constexpr double kCardRateSeconds = 1.0;

// A status returned by the bench data library (a cudaError_t) as a CudaError naming `what`.
void check_bench_fill(int status, const char* what);

// Device-side time of `reps` calls of f, by events on the legacy default stream.
template <class F>
double milliseconds_per_call(int reps, F&& f) {
  cudaEvent_t start, stop;
  DFLASH_CUDA_CHECK(cudaEventCreate(&start));
  DFLASH_CUDA_CHECK(cudaEventCreate(&stop));
  DFLASH_CUDA_CHECK(cudaEventRecord(start, nullptr));
  for (int r = 0; r < reps; ++r) f();
  DFLASH_CUDA_CHECK(cudaEventRecord(stop, nullptr));
  DFLASH_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  DFLASH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / reps;
}

struct GemmRate {
  std::string what;
  std::int64_t m, n, k;
  double ms = 0;
  double tflops() const { return gemm_flops(m, n, k) / (ms * 1e-3) / 1e12; }
};

// The card's bf16 rate: an 8192^3 product (random data; three warm-ups, then batches of ten until
// at least kCardRateSeconds have passed).
GemmRate measure_card_rate(DeviceAllocator& allocator, std::uint64_t seed);

}  // namespace dflash
