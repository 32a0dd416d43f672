// The reference loss head per policy at H 256, V 32000, T 2048 (issue 2): time per
// forward+backward, and the tracker's peak bytes by category as counters. The reference is
// double with a fixed summation order on DFLASH_THREADS threads (default 1); the interesting
// numbers are the relative costs (recompute does 5 V-wide products where materialize/retain do 3)
// and the memory each policy holds. Against PyTorch: bench_reference_vs_torch.
#include <benchmark/benchmark.h>

#include "reference/loss_head.hpp"
#include "reference/loss_head_problem.hpp"

namespace dflash {
namespace {

constexpr std::int64_t kRows = 2048, kHidden = 256, kVocab = 32000, kChunk = 256;

void BM_LossHead(benchmark::State& state, LossPolicy policy) {
  MemoryTracker data;
  const auto p = make_loss_head_problem<double>(data, {.rows = kRows, .hidden = kHidden, .vocab = kVocab, .seed = 7});
  LossHeadOptions o;
  o.policy = policy;
  o.chunk_rows = kChunk;
  MemoryTracker tracker;
  for (auto _ : state) {
    const LossHeadResult<double> r = run_loss_head(tracker, o, p.hidden, p.targets(), p.weight_sum);
    benchmark::DoNotOptimize(r.stats.loss);
  }
  const double gemm_passes = policy == LossPolicy::chunk_recompute ? 5 : 3;
  state.counters["GFLOP_per_iter"] = gemm_passes * 2.0 * kRows * kVocab * kHidden / 1e9;
  state.counters["GFLOPS"] = benchmark::Counter(gemm_passes * 2.0 * kRows * kVocab * kHidden / 1e9 * state.iterations(),
                                                benchmark::Counter::kIsRate);
  state.counters["peak_total_bytes"] = double(tracker.peak_total());
  state.counters["peak_loss_saved_bytes"] = double(tracker.peak(MemoryCategory::loss_saved));
  state.counters["peak_transient_bytes"] = double(tracker.peak(MemoryCategory::transient));
}

BENCHMARK_CAPTURE(BM_LossHead, materialize, LossPolicy::materialize)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK_CAPTURE(BM_LossHead, chunk_retain, LossPolicy::chunk_retain)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK_CAPTURE(BM_LossHead, chunk_recompute, LossPolicy::chunk_recompute)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK_CAPTURE(BM_LossHead, chunk_grad_in_forward, LossPolicy::chunk_grad_in_forward)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace
}  // namespace dflash

BENCHMARK_MAIN();
