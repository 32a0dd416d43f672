// Encoding values into a float dtype's bytes, per value: the bulk writer every safetensors file is
// written through (store_float_elements: a checkpoint's 5.2e9 fp32 values at full scale, an
// export's 1.7e9 bf16 ones) beside the element writer it replaced there (store_float_element, one
// call and one dtype switch a value), on the same 2^24 values into the same buffer.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "io/safetensors_dtype.hpp"

namespace dflash::safetensors {
namespace {

constexpr std::size_t kValues = std::size_t(1) << 24;

template <class T>
const std::vector<T>& values() {
  static const std::vector<T> v = [] {
    std::vector<T> out(kValues);
    for (std::size_t i = 0; i < kValues; ++i) out[i] = T((double(i) - 1e6) * 1.0000001e-3);
    return out;
  }();
  return v;
}

template <class T>
void BM_Bulk(benchmark::State& state, Dtype dtype) {
  const std::vector<T>& in = values<T>();
  std::vector<std::byte> out(kValues * dtype_size(dtype));
  for (auto _ : state) {
    store_float_elements(dtype, in.data(), in.size(), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["ns_per_value"] =
      benchmark::Counter(double(kValues), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

template <class T>
void BM_Element(benchmark::State& state, Dtype dtype) {
  const std::vector<T>& in = values<T>();
  const std::size_t size = dtype_size(dtype);
  std::vector<std::byte> out(kValues * size);
  for (auto _ : state) {
    for (std::size_t i = 0; i < in.size(); ++i) store_float_element(dtype, double(in[i]), out.data() + i * size);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["ns_per_value"] =
      benchmark::Counter(double(kValues), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_BulkFromFloat(benchmark::State& state, Dtype dtype) { BM_Bulk<float>(state, dtype); }
void BM_ElementFromFloat(benchmark::State& state, Dtype dtype) { BM_Element<float>(state, dtype); }
void BM_BulkFromDouble(benchmark::State& state, Dtype dtype) { BM_Bulk<double>(state, dtype); }
void BM_ElementFromDouble(benchmark::State& state, Dtype dtype) { BM_Element<double>(state, dtype); }

BENCHMARK_CAPTURE(BM_BulkFromFloat, f32, Dtype::F32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ElementFromFloat, f32, Dtype::F32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BulkFromDouble, f64, Dtype::F64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ElementFromDouble, f64, Dtype::F64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BulkFromDouble, bf16, Dtype::BF16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ElementFromDouble, bf16, Dtype::BF16)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dflash::safetensors

BENCHMARK_MAIN();
