#include "bench/cuda/gemm_rate.hpp"

#include "bench/cuda/bench_data.hpp"
#include "cuda/runtime/device_buffer.hpp"

namespace dflash {

void check_bench_fill(int status, const char* what) {
  check_cuda(static_cast<cudaError_t>(status), what, __FILE__, __LINE__);
}

GemmRate measure_card_rate(DeviceAllocator& allocator, std::uint64_t seed) {
  const std::int64_t n = 8192;
  DeviceBuffer<Bf16Bits> a(allocator, MemoryCategory::transient, n * n), b(allocator, MemoryCategory::transient, n * n),
      c(allocator, MemoryCategory::transient, n * n);
  check_bench_fill(dflash_bench_fill_uniform_bf16(a.data(), n * n, seed, 11, 1.0f), "fill a");
  check_bench_fill(dflash_bench_fill_uniform_bf16(b.data(), n * n, seed, 12, 1.0f), "fill b");
  CublasGemm gemm(allocator);
  GemmRate r{"card: 8192^3 bf16, fp32 accumulate, >= 1 s", n, n, n};
  milliseconds_per_call(3, [&] { gemm.logits(a.data(), b.data(), c.data(), n, n, n); });
  double total_ms = 0;
  int calls = 0;
  while (total_ms < 1000 * kCardRateSeconds) {
    total_ms += 10 * milliseconds_per_call(10, [&] { gemm.logits(a.data(), b.data(), c.data(), n, n, n); });
    calls += 10;
  }
  r.ms = total_ms / calls;
  return r;
}

}  // namespace dflash
