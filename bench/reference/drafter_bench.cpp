// The reference drafter's forward+backward (one training step's gradient) per trunk policy, on
// configs/tiny.json and configs/mid.json, dropout off and on. Time per step, block rows per
// second, and the tracker's peaks by category as counters. The reference is double with a fixed
// summation order on DFLASH_THREADS threads (default 1): the interesting numbers are the relative
// costs of recomputation and the memory each policy keeps. Against PyTorch: bench_reference_vs_torch.
#include <filesystem>
#include <string>

#include <benchmark/benchmark.h>

#include "reference/drafter.hpp"
#include "reference/drafter_problem.hpp"

namespace dflash {
namespace {

struct BenchCase {
  const char* config;           // file under configs/
  std::int64_t context_length;  // S
  std::int64_t sequences;       // nseq
};

constexpr BenchCase kTiny{"tiny.json", 32, 2};
constexpr BenchCase kMid{"mid.json", 512, 1};

void BM_DrafterStep(benchmark::State& state, BenchCase bench, TrunkPolicy policy, std::int64_t k, double dropout) {
  DrafterConfig config = load_drafter_config(std::filesystem::path(DFLASH_CONFIG_DIR) / bench.config);
  config.attention_dropout = dropout;
  config.hidden_dropout = dropout;
  MemoryTracker data;
  const auto params = init_drafter_parameters<double>(data, config, 1, 0.1);
  const auto frozen = init_frozen_weights<double>(data, config, 2);
  const auto batch = make_drafter_batch<double>(
      data, config,
      {.sequences = bench.sequences, .context_length = bench.context_length, .seed = 3, .mask_hole_fraction = 0.05});
  DrafterStepOptions options = drafter_step_options(config, 1, 0);
  options.trunk_policy = policy;
  options.checkpoint_every = k;
  MemoryTracker tracker;
  std::int64_t rows = 0;
  for (auto _ : state) {
    const DrafterStepResult<double> r = drafter_step(tracker, config, params, frozen, batch, options);
    benchmark::DoNotOptimize(r.outputs.stats.loss);
    rows = r.outputs.lse.numel();
  }
  state.counters["block_rows"] = double(rows);
  state.counters["block_rows_per_s"] =
      benchmark::Counter(double(rows) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["parameters"] = double(drafter_parameter_count(config));
  state.counters["peak_saved_bytes"] = double(tracker.peak(MemoryCategory::saved));
  state.counters["peak_loss_saved_bytes"] = double(tracker.peak(MemoryCategory::loss_saved));
  state.counters["peak_transient_bytes"] = double(tracker.peak(MemoryCategory::transient));
  state.counters["peak_total_bytes"] = double(tracker.peak_total());
}

BENCHMARK_CAPTURE(BM_DrafterStep, tiny_none, kTiny, TrunkPolicy::none, 1, 0.0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DrafterStep, tiny_per_layer, kTiny, TrunkPolicy::per_layer, 1, 0.0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DrafterStep, tiny_every_2, kTiny, TrunkPolicy::every_k, 2, 0.0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DrafterStep, tiny_per_layer_dropout, kTiny, TrunkPolicy::per_layer, 1, 0.1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DrafterStep, mid_none, kMid, TrunkPolicy::none, 1, 0.0)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK_CAPTURE(BM_DrafterStep, mid_per_layer, kMid, TrunkPolicy::per_layer, 1, 0.0)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_DrafterStep, mid_every_2, kMid, TrunkPolicy::every_k, 2, 0.0)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_DrafterStep, mid_per_layer_dropout, kMid, TrunkPolicy::per_layer, 1, 0.1)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace
}  // namespace dflash

BENCHMARK_MAIN();
