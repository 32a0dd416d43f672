// The full-scale CUDA loss head (T 32768, H 5120, V 248320 by default): wall time per forward +
// backward and device bytes per category for chunk_grad_in_forward and chunk_recompute at each
// chunk size (and materialize, which fits an H200, for comparison), beside the card's measured
// bf16 matrix rate (cuBLAS, 8192^3, random data, timed over >= 1 s) and the rate of the loss
// head's own products. Two rates per policy: the model-FLOP rate (the 3 useful V-wide products,
// 2 V H each, over the rows that carry weight) and the executed-FLOP rate (every product the
// policy runs, over the valid rows it computes: 5 passes for chunk_recompute). Outside the
// products, two views of the step: the elementwise kernels' share (every kernel of the loss head
// that is not a product - input checks, the valid-row list, zeroing, gather, row statistics,
// gradient, scatter, totals - each timed by cudaEvents on the benchmark's data, times its launches
// per step), which the target holds to 5%; and the non-GEMM share (the step time less its
// products' measured time: the kernels plus launch gaps and host round trips).
//
// Correctness gate (bench/cuda/full_scale_gate.hpp): every run's lse, token loss and dL/dY on ~30
// sampled rows are held to SPEC §10's bf16 rule against an fp64 recomputation from the same bf16
// inputs (bench/cuda/fp64_rows.hpp).
//
//   bench_cuda_loss_head [--rows T] [--hidden H] [--vocab V] [--chunks 2048,512] [--reps 3]
//                        [--seed S] [--no-materialize] [--json PATH] [--help]
//
// Prints a table, then "performance targets: met|MISSED ..." and, last, "correctness: PASS|FAIL".
// Exit: 0 correct and on target, 1 a correctness check failed, 3 correct but a performance target
// missed, 2 an error. --json writes the numbers (bench/cuda/summarize.py merges them with the
// PyTorch baseline's). Without a GPU it says so and exits 0 (1 if DFLASH_REQUIRE_GPU=1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "bench/cuda/bench_data.hpp"
#include "bench/cuda/bench_json.hpp"
#include "bench/cuda/bench_verdict.hpp"
#include "bench/cuda/fp64_rows.hpp"
#include "bench/cuda/full_scale_gate.hpp"
#include "bench/cuda/gemm_rate.hpp"
#include "common/gpu_required.hpp"
#include "common/tolerances.hpp"
#include "cuda/gemm/cublas_call.hpp"
#include "cuda/loss_head/head.hpp"
#include "cuda/runtime/check.hpp"
#include "cuda/runtime/device_probe.hpp"
#include "io/errors.hpp"
#include "io/file_write.hpp"

namespace dflash {
namespace {

// The targets for chunk_grad_in_forward at chunk 2048 (performance, not correctness: a
// miss is reported on its own line and exit code).
constexpr double kModelRateTarget = 0.70;         // model-FLOP rate / measured large-GEMM rate
constexpr double kElementwiseShareTarget = 0.05;  // elementwise kernels' share of the step
constexpr std::size_t kTransientTargetBytes = std::size_t(2) << 30;
constexpr std::int64_t kTargetChunk = 2048;

struct BenchOptions {
  std::int64_t rows = 32768, hidden = 5120, vocab = 248320;
  std::vector<std::int64_t> chunks = {2048, 512};
  int reps = 3;
  std::uint64_t seed = 20261129;
  bool materialize = true;
  bool help = false;
  std::string json;
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions o;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    auto value = [&]() -> std::string {
      if (a + 1 >= argc) throw_input_error(arg, "needs a value");
      return argv[++a];
    };
    if (arg == "--rows")
      o.rows = std::stoll(value());
    else if (arg == "--hidden")
      o.hidden = std::stoll(value());
    else if (arg == "--vocab")
      o.vocab = std::stoll(value());
    else if (arg == "--reps")
      o.reps = std::stoi(value());
    else if (arg == "--seed")
      o.seed = std::stoull(value());
    else if (arg == "--json")
      o.json = value();
    else if (arg == "--no-materialize")
      o.materialize = false;
    else if (arg == "--help")
      o.help = true;
    else if (arg == "--chunks") {
      o.chunks.clear();
      const std::string list = value();
      for (std::size_t p = 0; p < list.size();) {
        const std::size_t q = std::min(list.find(',', p), list.size());
        o.chunks.push_back(std::stoll(list.substr(p, q - p)));
        p = q + 1;
      }
    } else {
      throw_input_error("argument", str("'", arg, "' is not an option (see the header of loss_head_bench.cpp)"));
    }
  }
  if (o.reps < 1) throw_input_error("--reps", str(o.reps, " must be >= 1"));
  return o;
}

struct PolicyRun {
  LossPolicy policy = LossPolicy::chunk_recompute;
  std::int64_t chunk = 0;
  std::vector<double> ms;  // per forward + backward
  int gemm_passes = 0;
  double model_tflops = 0, executed_tflops = 0;
  double gemm_ms = -1;         // the products' measured time per step (-1: shape not measured)
  double elementwise_ms = -1;  // the elementwise kernels' time per step (-1: not measured)
  Bf16RuleReport gate;
  std::size_t peak_transient = 0, peak_loss_saved = 0, peak_gradients = 0, peak_outputs = 0, peak_loss_head = 0;
  std::size_t device_used_above_inputs = 0;  // cudaMemGetInfo after the runs, pool trimmed before
  LossHeadStats<double> stats;

  double median_ms() const {
    std::vector<double> s = ms;
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  }
};

struct Inputs {
  DeviceBuffer<Bf16Bits> hidden, teacher, head;
  DeviceBuffer<std::int64_t> labels;
  DeviceBuffer<float> weights;
  DeviceBuffer<std::uint8_t> valid;
  double weight_sum = 0;
};

Inputs make_inputs(DeviceAllocator& allocator, const BenchOptions& o) {
  const auto T = static_cast<std::size_t>(o.rows), H = static_cast<std::size_t>(o.hidden),
             V = static_cast<std::size_t>(o.vocab);
  Inputs in{DeviceBuffer<Bf16Bits>(allocator, MemoryCategory::inputs, T * H),
            DeviceBuffer<Bf16Bits>(allocator, MemoryCategory::inputs, T * H),
            DeviceBuffer<Bf16Bits>(allocator, MemoryCategory::frozen, V * H),
            DeviceBuffer<std::int64_t>(allocator, MemoryCategory::inputs, T),
            DeviceBuffer<float>(allocator, MemoryCategory::inputs, T),
            DeviceBuffer<std::uint8_t>(allocator, MemoryCategory::inputs, T),
            0.0};
  check_bench_fill(dflash_bench_fill_loss_head_inputs(in.hidden.data(), in.teacher.data(), in.head.data(),
                                                      in.labels.data(), in.weights.data(), in.valid.data(), o.rows,
                                                      o.hidden, o.vocab, o.seed, 4.0f, 1.0f),
                   "dflash_bench_fill_loss_head_inputs");
  for (float w : in.weights.download()) in.weight_sum += w;  // ascending, in double: W
  return in;
}

// Where the runs' logits and dL/dY products are cut into cuBLAS calls (gemm_slicing_within_span),
// as positions among the n valid rows: the slice starts past the first row of every chunk of every
// chunk size, and of materialize's one chunk of all n rows (cut in 4 at full scale).
std::vector<std::int64_t> gemm_call_starts(const BenchOptions& o, std::int64_t n) {
  std::vector<std::int64_t> sizes(o.chunks);
  if (o.materialize) sizes.push_back(n);
  std::vector<std::int64_t> starts;
  for (std::int64_t size : sizes) {
    const std::int64_t c = std::max<std::int64_t>(1, std::min(size, n));
    for (std::int64_t c0 = 0; c0 < n; c0 += c) {
      const std::int64_t rows = std::min(c, n - c0);
      for (const GemmCall& call : {logits_gemm_call(nullptr, nullptr, nullptr, rows, o.vocab, o.hidden),
                                   input_grad_gemm_call(nullptr, nullptr, nullptr, rows, o.vocab, o.hidden)}) {
        for (const GemmSlice& slice : gemm_slicing_within_span(call).n) {
          if (slice.first > 0) starts.push_back(c0 + slice.first);
        }
      }
    }
  }
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  return starts;
}

// The gate's expected values: the sampled rows' logits and dL/dY in fp64 on the device (at most
// kFp64MaxRows rows a pass), their statistics and dL/dz in double on the host.
GateRows gate_expectation(DeviceAllocator& allocator, const BenchOptions& o, const Inputs& in) {
  const std::vector<std::uint8_t> valid = in.valid.download();
  const auto valid_rows =
      static_cast<std::int64_t>(std::count_if(valid.begin(), valid.end(), [](std::uint8_t v) { return v != 0; }));
  const std::vector<std::int64_t> rows = gate_sample_rows(valid, o.vocab, o.chunks, gemm_call_starts(o, valid_rows));
  const auto n = rows.size();
  const auto V = static_cast<std::size_t>(o.vocab), H = static_cast<std::size_t>(o.hidden);
  const std::size_t pass = std::min<std::size_t>(kFp64MaxRows, 2 * n);  // rows a pass
  DeviceBuffer<std::int64_t> rows_d(allocator, MemoryCategory::transient, n);
  rows_d.upload(std::span<const std::int64_t>(rows));
  std::vector<double> zh(n * V), th(n * V);
  {
    DeviceBuffer<double> z(allocator, MemoryCategory::transient, pass * V),
        t(allocator, MemoryCategory::transient, pass * V);
    for (std::size_t j0 = 0; j0 < n; j0 += pass) {
      const std::size_t m = std::min(pass, n - j0);
      fp64_row_logits(in.hidden.data(), in.teacher.data(), in.head.data(), rows_d.data() + j0, static_cast<int>(m),
                      o.vocab, o.hidden, z.data(), t.data());
      copy_to_host(allocator, zh.data() + j0 * V, z.data(), m * V * sizeof(double));
      copy_to_host(allocator, th.data() + j0 * V, t.data(), m * V * sizeof(double));
    }
  }
  const std::vector<std::int64_t> labels = in.labels.download();
  const std::vector<float> weights = in.weights.download();
  GateRows g = gate_rows_from_logits(rows, zh, th, o.vocab, o.hidden, labels, weights, valid, in.weight_sum,
                                     hybrid_hyper<double>(LossHeadOptions{}));
  // exact then plain dL/dz (2n rows) through W, kFp64MaxRows rows a pass
  std::vector<double> dz(g.dz);
  dz.insert(dz.end(), g.plain_dz.begin(), g.plain_dz.end());
  std::vector<double> dyh(2 * n * H);
  {
    DeviceBuffer<double> dz_d(allocator, MemoryCategory::transient, pass * V),
        dy(allocator, MemoryCategory::transient, pass * H);
    for (std::size_t j0 = 0; j0 < 2 * n; j0 += pass) {
      const std::size_t m = std::min(pass, 2 * n - j0);
      copy_to_device(allocator, dz_d.data(), dz.data() + j0 * V, m * V * sizeof(double));
      fp64_rows_times_head(dz_d.data(), in.head.data(), static_cast<int>(m), o.vocab, o.hidden, dy.data());
      copy_to_host(allocator, dyh.data() + j0 * H, dy.data(), m * H * sizeof(double));
    }
  }
  g.hidden_grad.assign(dyh.begin(), dyh.begin() + static_cast<std::ptrdiff_t>(n * H));
  g.plain_hidden_grad.assign(dyh.begin() + static_cast<std::ptrdiff_t>(n * H), dyh.end());
  return g;
}

// The sampled rows of one run's outputs.
GateObserved observe(const DeviceAllocator& allocator, const GateRows& g, const CudaLossHeadForward& f,
                     const DeviceBuffer<float>& hidden_grad) {
  GateObserved o;
  const auto H = static_cast<std::size_t>(g.hidden);
  for (std::int64_t i : g.rows) {
    float lse = 0, loss = 0;
    std::vector<float> dy(H);
    copy_to_host(allocator, &lse, f.lse.data() + i, sizeof lse);
    copy_to_host(allocator, &loss, f.token_loss.data() + i, sizeof loss);
    copy_to_host(allocator, dy.data(), hidden_grad.data() + static_cast<std::size_t>(i) * H, H * sizeof(float));
    o.lse.push_back(lse);
    o.token_loss.push_back(loss);
    o.hidden_grad.insert(o.hidden_grad.end(), dy.begin(), dy.end());
  }
  return o;
}

PolicyRun run_policy(DeviceAllocator& allocator, const BenchOptions& o, const Inputs& in, const GateRows& gate,
                     LossPolicy policy, std::int64_t chunk) {
  LossHeadOptions lo;
  lo.policy = policy;
  lo.chunk_rows = chunk;
  const CudaLossHeadShape shape{o.rows, o.hidden, o.vocab};
  const CudaLossHeadTargets targets{
      in.teacher.data(), in.head.data(), {in.labels.data(), in.weights.data(), in.valid.data()}};
  PolicyRun run;
  run.policy = policy;
  run.chunk = chunk;
  run.gemm_passes = policy == LossPolicy::chunk_recompute ? 5 : 3;

  allocator.release_cached_memory();
  const std::size_t used_before = device_memory_info().used_bytes();
  const std::size_t held_before = allocator.tracker().current_total();
  allocator.reset_peaks();
  {
    CudaLossHead head(allocator, lo);
    auto step = [&](bool check) {
      CudaLossHeadForward f = head.forward(in.hidden.data(), shape, targets, in.weight_sum);
      DeviceBuffer<float> g = head.backward(targets, std::move(f.saved));
      allocator.synchronize();
      if (check) run.gate = check_full_scale_gate(gate, observe(allocator, gate, f, g));
      return f.stats;
    };
    run.stats = step(true);  // warm-up (cuBLAS heuristics, pool growth), and the gate's run
    for (int r = 0; r < o.reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      step(false);
      const auto t1 = std::chrono::steady_clock::now();
      run.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    run.device_used_above_inputs = device_memory_info().used_bytes() - used_before;
  }
  const MemoryTracker& t = allocator.tracker();
  run.peak_transient = t.peak(MemoryCategory::transient);
  run.peak_loss_saved = t.peak(MemoryCategory::loss_saved);
  run.peak_gradients = t.peak(MemoryCategory::gradients);
  run.peak_outputs = t.peak(MemoryCategory::outputs);
  run.peak_loss_head = t.peak_total() - held_before;
  return run;
}

std::string gib(std::size_t bytes) { return str(static_cast<double>(bytes) / double(1ull << 30)); }

// The loss head's own products at chunk c, on the benchmark's data.
std::pair<GemmRate, GemmRate> measure_chunk_products(DeviceAllocator& allocator, const BenchOptions& o,
                                                     const Inputs& in, std::int64_t c) {
  DeviceBuffer<Bf16Bits> z(allocator, MemoryCategory::transient, static_cast<std::size_t>(c * o.vocab));
  DeviceBuffer<float> dy(allocator, MemoryCategory::transient, static_cast<std::size_t>(c * o.hidden));
  CublasGemm gemm(allocator);
  GemmRate logits{str("logits: [", c, ",", o.hidden, "] x [", o.vocab, ",", o.hidden, "]^T -> bf16"), c, o.vocab,
                  o.hidden};
  GemmRate grad{str("dL/dY: [", c, ",", o.vocab, "] x [", o.vocab, ",", o.hidden, "] -> fp32"), c, o.hidden, o.vocab};
  milliseconds_per_call(2, [&] { gemm.logits(in.hidden.data(), in.head.data(), z.data(), c, o.vocab, o.hidden); });
  logits.ms =
      milliseconds_per_call(5, [&] { gemm.logits(in.hidden.data(), in.head.data(), z.data(), c, o.vocab, o.hidden); });
  milliseconds_per_call(2, [&] { gemm.input_grad(z.data(), in.head.data(), dy.data(), c, o.vocab, o.hidden); });
  grad.ms =
      milliseconds_per_call(5, [&] { gemm.input_grad(z.data(), in.head.data(), dy.data(), c, o.vocab, o.hidden); });
  return {logits, grad};
}

double non_gemm_share(const PolicyRun& r) { return r.gemm_ms < 0 ? -1 : 1 - r.gemm_ms / r.median_ms(); }
double elementwise_share(const PolicyRun& r) { return r.elementwise_ms < 0 ? -1 : r.elementwise_ms / r.median_ms(); }

// The loss head's kernels other than the products (cuda/loss_head/row_kernels.hpp), ms per launch,
// each timed by cudaEvents (a warm-up, then the mean of 5) on the benchmark's data, on chunks of c
// listed rows.
struct ElementwiseKernels {
  double checks = 0;        // forward's input checks: row targets, finiteness of Y, G (valid rows), W_lm
  double list = 0;          // the valid-row list
  double zero_outputs = 0;  // lse and token loss (the invalid rows' outputs)
  double zero_grad = 0;     // dL/dY [T, H] fp32 (the invalid rows' gradient)
  double gather = 0;        // one chunk's Y (or G) rows
  double row_stats = 0;     // one chunk's statistics
  double logit_grad = 0;    // one chunk's dL/dz, in place
  double scatter = 0;       // one chunk's dL/dY back to its rows
  double totals = 0;        // the loss totals over T rows

  // Per forward + backward of `policy`; chunks = valid rows / c (a shorter last chunk counts by its
  // rows). chunk_recompute gathers Y and G twice (forward, backward); materialize runs each chunk
  // kernel once over all rows, counted the same way.
  double per_step(LossPolicy policy, double chunks) const {
    const int gathers = policy == LossPolicy::chunk_recompute ? 4 : 2;
    const double once = checks + list + zero_outputs + zero_grad + totals;
    return once + chunks * (gathers * gather + row_stats + logit_grad + scatter);
  }
  std::string describe() const {
    return str("checks ", checks, ", list ", list, ", zero outputs ", zero_outputs, ", zero dL/dY ", zero_grad,
               ", totals ", totals, "; per chunk: gather ", gather, ", row stats ", row_stats, ", logit grad ",
               logit_grad, ", scatter ", scatter);
  }
};

template <class F>
double event_ms(F&& f) {
  f();  // warm-up
  return milliseconds_per_call(5, f);
}

ElementwiseKernels measure_elementwise(DeviceAllocator& allocator, const BenchOptions& o, const Inputs& in,
                                       std::int64_t c) {
  const std::int64_t T = o.rows, H = o.hidden, V = o.vocab;
  const auto Tu = static_cast<std::size_t>(T);
  const cudaStream_t stream = allocator.stream();
  const DeviceRowTargets targets{in.labels.data(), in.weights.data(), in.valid.data()};
  ElementwiseKernels k;

  const auto none = [](std::int64_t x) { return static_cast<unsigned long long>(x); };
  DeviceBuffer<RowTargetFaults> faults(allocator, MemoryCategory::transient, 1);
  const RowTargetFaults clean{none(T), none(T), none(T), none(T), none(T)};
  faults.upload(std::span(&clean, 1));
  DeviceBuffer<unsigned long long> first(allocator, MemoryCategory::transient, 3);
  const std::vector<unsigned long long> firsts{none(T * H), none(T * H), none(V * H)};
  first.upload(std::span<const unsigned long long>(firsts));
  k.checks = event_ms([&] {
    launch_find_row_target_faults(targets, T, V, faults.data(), stream);
    launch_find_non_finite_bf16(in.hidden.data(), T, H, nullptr, first.data(), stream);
    launch_find_non_finite_bf16(in.teacher.data(), T, H, in.valid.data(), first.data() + 1, stream);
    launch_find_non_finite_bf16(in.head.data(), V, H, nullptr, first.data() + 2, stream);
  });

  DeviceBuffer<std::int32_t> list(allocator, MemoryCategory::transient, Tu);
  DeviceBuffer<std::int32_t> count(allocator, MemoryCategory::transient, 1);
  k.list = event_ms([&] { launch_compact_valid_rows(in.valid.data(), T, list.data(), count.data(), stream); });
  const std::int64_t rows = std::min<std::int64_t>(c, count.download()[0]);

  DeviceBuffer<float> lse(allocator, MemoryCategory::transient, Tu);
  DeviceBuffer<float> token_loss(allocator, MemoryCategory::transient, Tu);
  DeviceBuffer<float> hidden_grad(allocator, MemoryCategory::transient, Tu * std::size_t(H));
  k.zero_outputs = event_ms([&] {
    lse.zero();
    token_loss.zero();
  });
  k.zero_grad = event_ms([&] { hidden_grad.zero(); });

  DeviceBuffer<Bf16Bits> y(allocator, MemoryCategory::transient, std::size_t(c * H)),
      g(allocator, MemoryCategory::transient, std::size_t(c * H));
  DeviceBuffer<Bf16Bits> z(allocator, MemoryCategory::transient, std::size_t(c * V)),
      t(allocator, MemoryCategory::transient, std::size_t(c * V));
  DeviceBuffer<float> dy(allocator, MemoryCategory::transient, std::size_t(c * H));
  k.gather = event_ms([&] { launch_gather_rows(in.hidden.data(), list.data(), rows, H, y.data(), stream); });
  launch_gather_rows(in.teacher.data(), list.data(), rows, H, g.data(), stream);
  {
    CublasGemm gemm(allocator);
    gemm.logits(y.data(), in.head.data(), z.data(), rows, V, H);
    gemm.logits(g.data(), in.head.data(), t.data(), rows, V, H);
  }
  DeviceBuffer<float> stats(allocator, MemoryCategory::transient, kSavedRowStats * Tu),
      ce(allocator, MemoryCategory::transient, Tu), kl(allocator, MemoryCategory::transient, Tu);
  DeviceBuffer<std::uint8_t> correct(allocator, MemoryCategory::transient, Tu);
  stats.zero();
  ce.zero();
  kl.zero();
  correct.zero();
  const DeviceRowOutputs out{stats.data(), lse.data(), token_loss.data(), ce.data(), kl.data(), correct.data()};
  const HybridWeights hw = hybrid_hyper<float>(LossHeadOptions{});
  k.row_stats =
      event_ms([&] { launch_hybrid_row_stats(z.data(), t.data(), rows, V, list.data(), targets, hw, out, stream); });
  // In place: later calls differentiate the previous result, finite numbers of the same kind.
  k.logit_grad = event_ms([&] {
    launch_hybrid_logit_grad(z.data(), t.data(), rows, V, list.data(), targets, hw, stats.data(),
                             static_cast<float>(in.weight_sum), stream);
  });
  k.scatter = event_ms([&] { launch_scatter_rows(dy.data(), list.data(), rows, H, hidden_grad.data(), stream); });
  DeviceBuffer<LossHeadStats<double>> totals(allocator, MemoryCategory::transient, 1);
  k.totals = event_ms([&] { launch_loss_totals(out, targets, T, totals.data(), stream); });
  return k;
}

void write_json(const std::string& path, const BenchOptions& o, const CudaDeviceStatus& gpu, const GemmRate& card,
                const std::vector<GemmRate>& shapes, const std::vector<PolicyRun>& runs, double weight_sum,
                std::int64_t weighted_rows, std::int64_t valid_rows) {
  std::ostringstream out;
  out.precision(10);
  out << "{\n  \"device\": \"" << gpu.summary() << "\",\n  \"rows\": " << o.rows << ", \"hidden\": " << o.hidden
      << ", \"vocab\": " << o.vocab << ", \"seed\": " << o.seed << ", \"weight_sum\": " << weight_sum
      << ", \"weighted_rows\": " << weighted_rows << ", \"valid_rows\": " << valid_rows
      << ",\n  \"card_bf16_tflops\": " << card.tflops() << ", \"card_rate_ms\": " << card.ms
      << ",\n  \"baseline_loss_tolerance\": " << kBaselineLossTolerance
      << ", \"targets\": {\"model_rate\": " << kModelRateTarget
      << ", \"elementwise_share\": " << kElementwiseShareTarget << ", \"transient_bytes\": " << kTransientTargetBytes
      << ", \"chunk\": " << kTargetChunk << "},\n  \"gemm_shapes\": [";
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    out << (i ? ",\n" : "\n") << "    {\"what\": \"" << shapes[i].what << "\", \"m\": " << shapes[i].m
        << ", \"n\": " << shapes[i].n << ", \"k\": " << shapes[i].k << ", \"ms\": " << shapes[i].ms
        << ", \"tflops\": " << shapes[i].tflops() << "}";
  }
  out << "\n  ],\n  \"runs\": [";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const PolicyRun& r = runs[i];
    out << (i ? ",\n" : "\n") << "    {\"policy\": \"" << loss_policy_name(r.policy) << "\", \"chunk\": " << r.chunk
        << ", \"ms_median\": " << r.median_ms() << ", \"ms\": [";
    for (std::size_t k = 0; k < r.ms.size(); ++k) out << (k ? ", " : "") << r.ms[k];
    out << "], \"gemm_passes\": " << r.gemm_passes << ", \"model_tflops\": " << r.model_tflops
        << ", \"executed_tflops\": " << r.executed_tflops
        << ", \"model_fraction_of_card_rate\": " << r.model_tflops / card.tflops()
        << ", \"executed_fraction_of_card_rate\": " << r.executed_tflops / card.tflops()
        << ", \"gemm_ms\": " << r.gemm_ms << ", \"non_gemm_share\": " << non_gemm_share(r)
        << ", \"elementwise_ms\": " << r.elementwise_ms << ", \"elementwise_share\": " << elementwise_share(r)
        << ", \"gate_ok\": " << (r.gate.ok() ? "true" : "false") << ", \"gate_worst_ratio\": " << r.gate.worst_ratio()
        << ", \"peak_transient_bytes\": " << r.peak_transient << ", \"peak_loss_saved_bytes\": " << r.peak_loss_saved
        << ", \"peak_gradients_bytes\": " << r.peak_gradients << ", \"peak_outputs_bytes\": " << r.peak_outputs
        << ", \"peak_loss_head_bytes\": " << r.peak_loss_head
        << ", \"device_used_above_inputs_bytes\": " << r.device_used_above_inputs << ", \"loss\": " << r.stats.loss
        << ", \"ce\": " << r.stats.ce << ", \"kl\": " << r.stats.kl << ", \"accuracy\": " << r.stats.accuracy() << "}";
  }
  out << "\n  ]\n}\n";
  // never half a file, never through a link; a non-finite number as Python reads it
  write_file_atomically(path, python_json_numbers(out.str()));
}

int bench_main(int argc, char** argv) {
  const BenchOptions o = parse(argc, argv);
  if (o.help) {
    std::cout << "bench_cuda_loss_head [--rows T] [--hidden H] [--vocab V] [--chunks 2048,512] [--reps 3] [--seed S]\n"
                 "                     [--no-materialize] [--json PATH]   (bench/cuda/loss_head_bench.cpp)\n";
    return 0;
  }
  const CudaDeviceStatus& gpu = cuda_device_status();
  if (!gpu.available) {
    std::cout << "bench_cuda_loss_head: SKIPPED, " << gpu.summary() << "\n";
    return gpu_required() ? 1 : 0;
  }
  std::cout << "device: " << gpu.summary() << "\nshape: T " << o.rows << ", H " << o.hidden << ", V " << o.vocab
            << "; bf16 inputs and logits, fp32 statistics and dL/dY\n";
  DeviceAllocator allocator;
  const GemmRate card = measure_card_rate(allocator, o.seed);
  allocator.release_cached_memory();
  const Inputs in = make_inputs(allocator, o);
  std::int64_t weighted_rows = 0, valid_rows = 0;  // w > 0; valid = 1 (the rows the loss head computes)
  for (float w : in.weights.download()) weighted_rows += w > 0 ? 1 : 0;
  for (std::uint8_t v : in.valid.download()) valid_rows += v;
  const GateRows gate = gate_expectation(allocator, o, in);

  std::vector<GemmRate> shapes;
  std::vector<std::pair<std::int64_t, std::pair<GemmRate, GemmRate>>> per_chunk;
  std::vector<std::pair<std::int64_t, ElementwiseKernels>> elementwise;
  for (std::int64_t chunk : o.chunks) {
    const std::int64_t c = std::min(chunk, o.rows);
    per_chunk.push_back({chunk, measure_chunk_products(allocator, o, in, c)});
    shapes.push_back(per_chunk.back().second.first);
    shapes.push_back(per_chunk.back().second.second);
    elementwise.push_back({chunk, measure_elementwise(allocator, o, in, c)});
    allocator.release_cached_memory();
    std::cout << "elementwise kernels at chunk " << chunk
              << " (ms per launch, cudaEvents): " << elementwise.back().second.describe() << "\n";
  }

  // A configuration that fails (out of memory, say) is reported and the others still run.
  std::vector<PolicyRun> runs;
  std::vector<std::string> wrong;  // correctness failures
  auto attempt = [&](LossPolicy p, std::int64_t chunk) {
    try {
      PolicyRun r = run_policy(allocator, o, in, gate, p, chunk);
      const double model = 3 * gemm_flops(weighted_rows, o.vocab, o.hidden);
      const double executed = r.gemm_passes * gemm_flops(valid_rows, o.vocab, o.hidden);
      r.model_tflops = model / (r.median_ms() * 1e-3) / 1e12;
      r.executed_tflops = executed / (r.median_ms() * 1e-3) / 1e12;
      for (const auto& [c, products] : per_chunk) {
        if (c != chunk || p == LossPolicy::materialize) continue;
        const double chunks = double(valid_rows) / double(std::min(c, o.rows));
        const int logits_per_chunk = p == LossPolicy::chunk_recompute ? 4 : 2;
        r.gemm_ms = chunks * (logits_per_chunk * products.first.ms + products.second.ms);
      }
      // materialize: the kernels over all rows at once, scaled from the first chunk size's.
      for (const auto& [c, kernels] : elementwise) {
        if (c != chunk && !(p == LossPolicy::materialize && c == elementwise.front().first)) continue;
        r.elementwise_ms = kernels.per_step(p, double(valid_rows) / double(std::min(c, o.rows)));
        break;
      }
      std::cout << loss_policy_name(p) << " chunk " << chunk << " gate (" << gate.rows.size() << " rows, fp64):\n"
                << r.gate.describe();
      if (!r.gate.ok()) wrong.push_back(str(loss_policy_name(p), " chunk ", chunk, ": gate"));
      runs.push_back(std::move(r));
    } catch (const std::exception& e) {
      wrong.push_back(str(loss_policy_name(p), " chunk ", chunk, ": ", e.what()));
      std::cout << loss_policy_name(p) << " chunk " << chunk << " FAILED: " << e.what() << "\n";
    }
  };
  for (std::int64_t chunk : o.chunks) {
    attempt(LossPolicy::chunk_grad_in_forward, chunk);
    attempt(LossPolicy::chunk_recompute, chunk);
  }
  if (o.materialize) attempt(LossPolicy::materialize, o.rows);

  std::printf("\n%-50s %10s %10s\n", "bf16 product", "ms", "TFLOP/s");
  std::printf("%-50s %10.3f %10.1f\n", card.what.c_str(), card.ms, card.tflops());
  for (const GemmRate& g : shapes) std::printf("%-50s %10.3f %10.1f\n", g.what.c_str(), g.ms, g.tflops());
  std::printf("\n%-22s %6s %10s %6s %9s %8s %9s %8s %9s %9s %11s %11s %11s %11s\n", "policy", "chunk", "ms fwd+bwd",
              "GEMMs", "model TF", "of card", "exec TF", "of card", "elemwise", "non-GEMM", "transient", "loss_saved",
              "loss head", "cudaMemGet");
  const auto percent = [](double share) { return share < 0 ? std::string("n/a") : str(100 * share).substr(0, 5); };
  for (const PolicyRun& r : runs) {
    std::printf("%-22s %6lld %10.1f %6d %9.1f %7.1f%% %9.1f %7.1f%% %8s%% %8s%% %10s G %10s G %10s G %10s G\n",
                std::string(loss_policy_name(r.policy)).c_str(), static_cast<long long>(r.chunk), r.median_ms(),
                r.gemm_passes, r.model_tflops, 100 * r.model_tflops / card.tflops(), r.executed_tflops,
                100 * r.executed_tflops / card.tflops(), percent(elementwise_share(r)).c_str(),
                percent(non_gemm_share(r)).c_str(), gib(r.peak_transient).substr(0, 6).c_str(),
                gib(r.peak_loss_saved).substr(0, 6).c_str(), gib(r.peak_loss_head).substr(0, 6).c_str(),
                gib(r.device_used_above_inputs).substr(0, 6).c_str());
  }
  if (!runs.empty()) {
    std::printf("loss %.6f ce %.6f kl %.6f accuracy %.6f (W = %.3f)\n", runs.front().stats.loss, runs.front().stats.ce,
                runs.front().stats.kl, runs.front().stats.accuracy(), in.weight_sum);
  }
  if (!o.json.empty()) write_json(o.json, o, gpu, card, shapes, runs, in.weight_sum, weighted_rows, valid_rows);

  // Targets: chunk_grad_in_forward at kTargetChunk.
  std::vector<std::string> missed;
  bool measured = false;
  for (const PolicyRun& r : runs) {
    if (r.policy != LossPolicy::chunk_grad_in_forward || r.chunk != kTargetChunk) continue;
    measured = true;
    if (r.model_tflops < kModelRateTarget * card.tflops()) {
      missed.push_back(
          str("model-FLOP rate ", 100 * r.model_tflops / card.tflops(), "% < ", 100 * kModelRateTarget, "%"));
    }
    if (elementwise_share(r) > kElementwiseShareTarget) {
      missed.push_back(
          str("elementwise share ", 100 * elementwise_share(r), "% > ", 100 * kElementwiseShareTarget, "%"));
    }
    if (r.peak_transient > kTransientTargetBytes)
      missed.push_back(str("transient ", gib(r.peak_transient), " GiB > 2 GiB"));
  }
  if (!measured) missed.push_back(str("chunk_grad_in_forward at chunk ", kTargetChunk, " was not measured"));
  return report_verdicts(missed, wrong);
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) {
  return dflash::run_benchmark("bench_cuda_loss_head", dflash::bench_main, argc, argv);
}
