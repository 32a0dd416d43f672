// The whole drafter step on one GPU at full scale (configs/qwen3.6-27b.json, S 4096: T 32768 block
// tokens, H 5120, I 17408, 32/8 heads, d 128, 5 layers, V 248320), from device-resident synthetic
// inputs (bench/cuda/bench_data.hpp; the PyTorch peer drafter_step_torch.py fills its own tensors
// through the same library, so both run on bit-identical data). For per_layer x chunk_recompute and
// per_layer x chunk_grad_in_forward: step time (median of --reps after a warm-up), model FLOPs
// (bench/cuda/drafter_step_metrics.hpp) and MFU against the measured large-GEMM bf16 rate and the
// Hopper SXM datasheet peak (H100 and H200 alike), the attention kernels' time (cudaEvents around every attention launch of the
// step) and FLOP rate (per_layer x chunk_recompute once more with the other attention forward
// kernel than the step's default, cuda/attention/tensor_core_program.hpp: both forward kernels timed), and each category's peak bytes (the DeviceAllocator's tracker) against
// `dflash plan` for the same config and policies (one GPU).
//
//   bench_cuda_drafter_step --config configs/qwen3.6-27b.json [--context 4096] [--reps 3] [--seed S]
//                           [--json PATH] [--count] (--help: the options; --count prints the FLOPs each
//                                                   configuration executes per step, for ci/gpu's plan)
// A quick shape: --config bench/cuda/drafter_step_quick.json --context 1024.
//
// Correctness: every run's loss finite, its gradients finite (their squared norms, on the device),
// and every run's loss bitwise the same (the step is deterministic). The PyTorch comparison is
// summarize_step.py's. Targets: MFU >= 50% of the measured GEMM rate, peak per category within 2%
// above the plan (and, in summarize_step.py, faster than the PyTorch peer).
// Prints a table, "performance targets: met|MISSED ..." and, last, "correctness: PASS|FAIL". Exit:
// 0 correct and on target, 1 a correctness check failed, 3 correct but a target missed, 2 an
// error. Without a GPU it says so and exits 0 (1 if DFLASH_REQUIRE_GPU=1).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <CLI/CLI.hpp>

#include "bench/cuda/bench_data.hpp"
#include "bench/cuda/bench_json.hpp"
#include "bench/cuda/bench_verdict.hpp"
#include "bench/cuda/drafter_step_metrics.hpp"
#include "bench/cuda/gemm_rate.hpp"
#include "common/gpu_required.hpp"
#include "common/tolerances.hpp"
#include "cuda/drafter/sequence_step.hpp"
#include "cuda/loss_head/head.hpp"
#include "cuda/optimizer/adamw_kernels.hpp"
#include "cuda/runtime/device_probe.hpp"
#include "cuda/trunk/device_backend.hpp"
#include "io/errors.hpp"
#include "io/file_write.hpp"
#include "planner/training_plan.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {
namespace {

constexpr float kLogitScale = 4.0f;  // W_lm's amplitude: logits of size ~4 for unit-RMS rows (as the loss-head bench)

struct BenchOptions {
  std::string config;
  std::int64_t context = 4096;
  int reps = 3;
  std::uint64_t seed = 20261129;
  std::string json;
  bool count = false;
};

// cudaEvents around every attention launch of a step, on the allocator's stream; read after the
// step has finished.
class AttentionTimer {
 public:
  AttentionTimer() = default;
  AttentionTimer(const AttentionTimer&) = delete;
  AttentionTimer& operator=(const AttentionTimer&) = delete;
  ~AttentionTimer() {
    for (Span& s : spans_) {
      cudaEventDestroy(s.start);
      cudaEventDestroy(s.stop);
    }
  }
  void reset() { used_ = 0; }
  void start(cudaStream_t stream) {
    if (used_ == spans_.size()) {
      Span s{};
      DFLASH_CUDA_CHECK(cudaEventCreate(&s.start));
      DFLASH_CUDA_CHECK(cudaEventCreate(&s.stop));
      spans_.push_back(s);
    }
    DFLASH_CUDA_CHECK(cudaEventRecord(spans_[used_].start, stream));
  }
  void stop(cudaStream_t stream, bool backward) {
    spans_[used_].backward = backward;
    DFLASH_CUDA_CHECK(cudaEventRecord(spans_[used_].stop, stream));
    ++used_;
  }
  double milliseconds(bool backward) const {
    double total = 0;
    for (std::size_t i = 0; i < used_; ++i) {
      if (spans_[i].backward != backward) continue;
      float ms = 0;
      DFLASH_CUDA_CHECK(cudaEventElapsedTime(&ms, spans_[i].start, spans_[i].stop));
      total += ms;
    }
    return total;
  }

 private:
  struct Span {
    cudaEvent_t start, stop;
    bool backward;
  };
  std::vector<Span> spans_;
  std::size_t used_ = 0;
};

// CudaBackend with the attention launches timed (the trunk is a template over its backend).
struct TimedCudaBackend : CudaBackend {
  AttentionTimer* timer;

  void attention_forward(const AttentionProblem& pb, const AttentionOperands<Storage>& in,
                         const AttentionForwardOutputs<Storage>& out) const {
    timer->start(stream());
    CudaBackend::attention_forward(pb, in, out);
    timer->stop(stream(), false);
  }
  void attention_backward(const AttentionProblem& pb, const AttentionOperands<Storage>& in,
                          const AttentionGradients& grads) const {
    timer->start(stream());
    CudaBackend::attention_backward(pb, in, grads);
    timer->stop(stream(), true);
  }
};

// The synthetic sequence (host): anchor slots and block rows.
struct SequenceRows {
  std::vector<std::int64_t> anchors, input_tokens, positions, labels, teacher_rows;
  std::vector<std::uint8_t> keep, valid;
  std::vector<float> weights;
  double weight_sum = 0;
};

SequenceRows make_rows(const DrafterConfig& c, const DrafterDims& m, std::uint64_t seed) {
  const auto N = static_cast<std::size_t>(m.N), T = static_cast<std::size_t>(m.T);
  SequenceRows r{std::vector<std::int64_t>(N), std::vector<std::int64_t>(T), std::vector<std::int64_t>(T),
                 std::vector<std::int64_t>(T), std::vector<std::int64_t>(T), std::vector<std::uint8_t>(N),
                 std::vector<std::uint8_t>(T), std::vector<float>(T),        0.0};
  char error[512] = {};
  if (dflash_bench_drafter_sequence(m.S, m.V, m.B, c.mask_token_id, m.N, c.loss_decay_gamma.value_or(0.0), seed, c.seed,
                                    r.anchors.data(), r.keep.data(), r.input_tokens.data(), r.positions.data(),
                                    r.labels.data(), r.teacher_rows.data(), r.weights.data(), r.valid.data(), error,
                                    sizeof error) != 0) {
    throw_input_error("synthetic sequence", error);
  }
  for (float w : r.weights) r.weight_sum += w;  // ascending, in double: W
  return r;
}

// Parameters (bf16 matrices, fp32 norm weights of 1), their fp32 gradients, E and W_lm.
struct DeviceModel {
  std::vector<DeviceBuffer<Bf16Bits>> matrices;
  std::vector<DeviceBuffer<float>> vectors, grads;
  std::vector<std::string> names;
  DeviceBuffer<Bf16Bits> embed, lm_head;
  CudaDrafterWeights weights;

  DeviceModel(const CudaBackend& be, const DrafterConfig& c, std::uint64_t seed)
      : embed(be.allocator, MemoryCategory::frozen, static_cast<std::size_t>(c.vocab_size * c.hidden_size)),
        lm_head(be.allocator, MemoryCategory::frozen, static_cast<std::size_t>(c.vocab_size * c.hidden_size)) {
    DeviceAllocator& a = be.allocator;
    std::vector<const void*> values;
    std::vector<float*> grad_of;
    unsigned int index = 0;
    for (const ParameterShape& p : drafter_parameter_shapes(c)) {
      std::int64_t n = 1;
      for (std::int64_t e : p.shape) n *= e;
      if (p.shape.size() == 2) {
        matrices.emplace_back(a, MemoryCategory::parameters, static_cast<std::size_t>(n));
        check_bench_fill(dflash_bench_fill_drafter_matrix(matrices.back().data(), p.shape[0], p.shape[1], seed, index),
                         "dflash_bench_fill_drafter_matrix");
        values.push_back(matrices.back().data());
      } else {
        vectors.push_back(
            be.from_host(MemoryCategory::parameters, std::vector<float>(static_cast<std::size_t>(n), 1.0f)));
        values.push_back(vectors.back().data());
      }
      grads.emplace_back(a, MemoryCategory::gradients, static_cast<std::size_t>(n));
      grad_of.push_back(grads.back().data());
      names.push_back(p.name);
      ++index;
    }
    check_bench_fill(
        dflash_bench_fill_frozen(embed.data(), lm_head.data(), c.vocab_size, c.hidden_size, seed, kLogitScale),
        "dflash_bench_fill_frozen");
    weights.lm_head = lm_head.data();
    bind_trunk_parameters(c, values, grad_of, embed.data(), weights.trunk, weights.grads);
  }

  void zero_grads() {
    for (DeviceBuffer<float>& g : grads) g.zero();
  }

  // Each gradient's L2 norm (the optimizer's two-pass device reduction; NaN or inf if any element is).
  std::vector<double> grad_norms(DeviceAllocator& a) const {
    std::vector<double> out;
    DeviceBuffer<double> norm2(a, MemoryCategory::transient, 1);
    for (const DeviceBuffer<float>& g : grads) {
      const auto n = static_cast<std::int64_t>(g.size());
      DeviceBuffer<double> partials(a, MemoryCategory::transient, static_cast<std::size_t>(norm_blocks(n)));
      launch_squared_norm_partials(g.data(), n, partials.data(), a.stream());
      launch_squared_norm_finish(partials.data(), norm_blocks(n), norm2.data(), a.stream());
      out.push_back(std::sqrt(norm2.download().at(0)));
    }
    return out;
  }
};

struct DeviceSequence {
  DeviceBuffer<std::int64_t> anchors, positions, context_positions, tokens, labels, teacher_index;
  DeviceBuffer<std::uint8_t> keep, valid;
  DeviceBuffer<float> weights;
  DeviceBuffer<Bf16Bits> features, teacher;

  DeviceSequence(const CudaBackend& be, const DrafterDims& m, const SequenceRows& r, std::uint64_t seed)
      : anchors(be.from_host(MemoryCategory::inputs, r.anchors)),
        positions(be.from_host(MemoryCategory::inputs, r.positions)),
        context_positions(be.allocator, MemoryCategory::inputs, static_cast<std::size_t>(m.S)),
        tokens(be.from_host(MemoryCategory::inputs, r.input_tokens)),
        labels(be.from_host(MemoryCategory::inputs, r.labels)),
        teacher_index(be.from_host(MemoryCategory::transient, r.teacher_rows)),
        keep(be.from_host(MemoryCategory::inputs, r.keep)),
        valid(be.from_host(MemoryCategory::inputs, r.valid)),
        weights(be.from_host(MemoryCategory::inputs, r.weights)),
        features(be.allocator, MemoryCategory::inputs, static_cast<std::size_t>(m.S * m.feature_width())),
        teacher(be.allocator, MemoryCategory::inputs, static_cast<std::size_t>(m.T * m.H)) {
    std::vector<std::int64_t> j(static_cast<std::size_t>(m.S));
    for (std::size_t p = 0; p < j.size(); ++p) j[p] = static_cast<std::int64_t>(p);
    context_positions.upload(j);
    check_bench_fill(dflash_bench_fill_drafter_inputs(features.data(), m.S, m.feature_width(), teacher.data(),
                                                      teacher_index.data(), m.T, m.H, seed),
                     "dflash_bench_fill_drafter_inputs");
    teacher_index.release();
  }

  CudaSequenceInputs view() const {
    return CudaSequenceInputs{anchors.data(),   keep.data(),
                              positions.data(), context_positions.data(),
                              tokens.data(),    features.data(),
                              teacher.data(),   DeviceRowTargets{labels.data(), weights.data(), valid.data()},
                              nullptr};
  }
};

struct PolicyRun {
  LossPolicy policy = LossPolicy::chunk_recompute;
  AttentionForwardKernel attention_forward = AttentionForwardKernel::cuda_cores;
  AttentionBackwardKernel attention_backward = AttentionBackwardKernel::cuda_cores;
  // The step's own attention kernels (the configurations the targets are for), or the run that
  // switches both to the other kind, measured for its attention times alone.
  bool step_kernels = true;
  std::vector<double> ms, attention_forward_ms, attention_backward_ms;
  std::vector<double> losses;
  LossHeadStats<double> stats;
  std::vector<double> grad_norms;
  std::vector<CategoryComparison> memory;
  std::int64_t peak_total = 0, planned_total = 0;

  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  double median_ms() const { return median(ms); }
  bool tensor_core_forward() const { return attention_forward == AttentionForwardKernel::tensor_cores_where_supported; }
  bool tensor_core_backward() const {
    return attention_backward == AttentionBackwardKernel::tensor_cores_where_supported;
  }
  std::string name() const {
    return str("per_layer x ", loss_policy_name(policy), tensor_core_forward() ? ", tc attn fwd" : ", cc attn fwd",
               tensor_core_backward() ? ", tc bwd" : ", cc bwd");
  }
};

PolicyRun run_policy(const CudaBackend& be, const DrafterConfig& config, const DrafterDims& dims, DeviceModel& model,
                     const DeviceSequence& seq, double weight_sum, LossPolicy policy, int reps,
                     AttentionForwardKernel attention_forward, AttentionBackwardKernel attention_backward) {
  DeviceAllocator& allocator = be.allocator;
  DrafterStepOptions options = drafter_step_options(config);
  options.trunk_policy = TrunkPolicy::per_layer;
  options.checkpoint_every = 1;
  options.loss_policy = policy;
  LossHeadOptions loss_options = config.loss_head_options();
  loss_options.policy = policy;
  loss_options.chunk_rows = options.loss_chunk_rows;
  validate_loss_head_options(loss_options);

  PlanRequest request = PlanRequest::from_config(config);
  request.tokens = dims.T;
  request.context = dims.S;
  request.loss_policy = policy;
  request.loss_chunk_rows = options.loss_chunk_rows;
  request.trunk_policy = options.trunk_policy;
  request.checkpoint_every = 1;
  request.layout.gpus = 1;
  request.layout.zero_stage = 0;
  const MemoryPlan plan = plan_training_memory(request);

  PolicyRun run;
  run.policy = policy;
  run.attention_forward = attention_forward;
  run.attention_backward = attention_backward;
  allocator.release_cached_memory();
  allocator.reset_peaks();
  {
    AttentionTimer timer;
    CudaBackend base = be;
    base.attention_forward_kernel = attention_forward;
    base.attention_backward_kernel = attention_backward;
    const TimedCudaBackend backend{base, &timer};
    CudaLossHead head(allocator, loss_options);
    for (int r = 0; r <= reps; ++r) {  // run 0 is the warm-up (cuBLAS heuristics, pool growth)
      model.zero_grads();
      allocator.synchronize();
      timer.reset();
      const auto t0 = std::chrono::steady_clock::now();
      run.stats =
          cuda_drafter_sequence_step(backend, head, config, dims, model.weights, seq.view(), options, 0, weight_sum);
      allocator.synchronize();
      const auto t1 = std::chrono::steady_clock::now();
      if (r == 0) continue;
      run.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      run.attention_forward_ms.push_back(timer.milliseconds(false));
      run.attention_backward_ms.push_back(timer.milliseconds(true));
      run.losses.push_back(run.stats.loss);
    }
  }
  run.memory = compare_plan_with_tracker(plan.categories, allocator.tracker());
  run.peak_total = static_cast<std::int64_t>(allocator.tracker().peak_total());
  for (const CategoryComparison& c : run.memory) run.planned_total += c.planned;
  run.grad_norms = model.grad_norms(allocator);
  return run;
}

std::string gib(std::int64_t bytes) { return str(double(bytes) / double(1ll << 30)).substr(0, 6); }

void write_json(const std::string& path, const BenchOptions& o, const CudaDeviceStatus& gpu, const DrafterDims& m,
                const GemmRate& card, const StepFlops& flops, const std::vector<std::int64_t>& pairs,
                const SequenceRows& rows, const std::vector<std::string>& names, const std::vector<PolicyRun>& runs) {
  std::ostringstream out;
  out.precision(10);
  out << "{\n  \"device\": \"" << gpu.summary() << "\",\n  \"config\": \"" << o.config << "\", \"seed\": " << o.seed
      << ",\n  \"dims\": {\"T\": " << m.T << ", \"S\": " << m.S << ", \"N\": " << m.N << ", \"B\": " << m.B
      << ", \"H\": " << m.H << ", \"I\": " << m.I << ", \"nh\": " << m.nh << ", \"nkv\": " << m.nkv
      << ", \"d\": " << m.d << ", \"K\": " << m.K << ", \"V\": " << m.V << ", \"L\": " << m.L
      << "},\n  \"weight_sum\": " << rows.weight_sum << ", \"card_bf16_tflops\": " << card.tflops()
      << ", \"card_rate_ms\": " << card.ms << ", \"datasheet_bf16_tflops\": " << kHopperSxmDatasheetBf16Tflops
      << ",\n  \"baseline_loss_tolerance\": " << kStepBaselineLossTolerance
      << ", \"targets\": {\"mfu\": " << kStepMfuTarget << ", \"plan_excess\": " << kPlanExcessTarget
      << "},\n  \"visible_pairs\": [";
  for (std::size_t l = 0; l < pairs.size(); ++l) out << (l ? ", " : "") << pairs[l];
  out << "],\n  \"flops\": {\"block_linear\": " << flops.block_linear << ", \"context\": " << flops.context
      << ", \"attention_forward\": " << flops.attention_forward
      << ", \"attention_backward\": " << flops.attention_backward << ", \"loss_head\": " << flops.loss_head
      << ", \"model\": " << flops.model() << "},\n  \"parameters\": [";
  for (std::size_t i = 0; i < names.size(); ++i) out << (i ? ", " : "") << "\"" << names[i] << "\"";
  out << "],\n  \"runs\": [";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const PolicyRun& r = runs[i];
    const StepFlops f = drafter_step_flops(m, pairs, false, TrunkPolicy::per_layer, r.policy);
    const double s = r.median_ms() * 1e-3;
    out << (i ? ",\n" : "\n") << "    {\"trunk_policy\": \"per_layer\", \"loss_policy\": \""
        << loss_policy_name(r.policy) << "\", \"ms_median\": " << r.median_ms() << ", \"ms\": [";
    for (std::size_t k = 0; k < r.ms.size(); ++k) out << (k ? ", " : "") << r.ms[k];
    out << "], \"executed_flops\": " << f.executed() << ", \"model_tflops\": " << flops.model() / s / 1e12
        << ", \"mfu_of_card\": " << flops.model() / s / 1e12 / card.tflops()
        << ", \"mfu_of_datasheet\": " << flops.model() / s / 1e12 / kHopperSxmDatasheetBf16Tflops
        << ", \"attention_forward_ms\": " << PolicyRun::median(r.attention_forward_ms)
        << ", \"attention_backward_ms\": " << PolicyRun::median(r.attention_backward_ms)
        << ", \"attention_executed_flops\": " << f.attention_executed() << ", \"attention_forward_kernel\": \""
        << (r.tensor_core_forward() ? "tensor_cores" : "cuda_cores")
        << "\", \"attention_forward_executed_flops\": " << f.attention_forward + f.attention_recompute
        << ", \"attention_backward_kernel\": \"" << (r.tensor_core_backward() ? "tensor_cores" : "cuda_cores")
        << "\", \"attention_backward_executed_flops\": " << f.attention_backward
        << ", \"step_kernels\": " << (r.step_kernels ? "true" : "false") << ", \"loss\": " << r.stats.loss
        << ", \"ce\": " << r.stats.ce << ", \"kl\": " << r.stats.kl << ", \"accuracy\": " << r.stats.accuracy()
        << ", \"losses\": [";
    for (std::size_t k = 0; k < r.losses.size(); ++k) out << (k ? ", " : "") << r.losses[k];
    out << "], \"grad_norms\": [";
    for (std::size_t k = 0; k < r.grad_norms.size(); ++k) out << (k ? ", " : "") << r.grad_norms[k];
    out << "], \"peak_total_bytes\": " << r.peak_total << ", \"planned_total_bytes\": " << r.planned_total
        << ", \"memory\": [";
    for (std::size_t k = 0; k < r.memory.size(); ++k) {
      out << (k ? ", " : "") << "{\"category\": \"" << category_name(r.memory[k].category)
          << "\", \"planned\": " << r.memory[k].planned << ", \"measured\": " << r.memory[k].measured << "}";
    }
    out << "]}";
  }
  out << "\n  ]\n}\n";
  // never half a file, never through a link; a non-finite number as Python reads it
  write_file_atomically(path, python_json_numbers(out.str()));
}

int bench_main(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{
      "The whole drafter step on one GPU beside the plan and the card's bf16 rate "
      "(bench/cuda/drafter_step_bench.cpp)"};
  app.add_option("--config", o.config, "drafter config JSON (configs/qwen3.6-27b.json: full scale)")->required();
  app.add_option("--context", o.context, "context length S")->check(CLI::PositiveNumber);
  app.add_option("--reps", o.reps, "timed steps after the warm-up (their median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "the inputs' Philox seed");
  app.add_option("--json", o.json, "write the numbers here (bench/cuda/summarize_step.py reads them)");
  app.add_flag("--count", o.count,
               "print what each measured configuration executes per step and exit, without a GPU (ci/gpu_plan.py)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const DrafterConfig config = load_drafter_config(o.config);
  validate_drafter_config(config);
  const DrafterDims dims = DrafterDims::of(config, o.context, config.max_anchors);
  const SequenceRows rows = make_rows(config, dims, o.seed);
  std::vector<std::int64_t> pairs;
  for (const LayerType t : config.layer_types) {
    pairs.push_back(attention_visible_pairs(rows.anchors, rows.keep, dims.B, t == LayerType::sliding_attention,
                                            config.sliding_window.value_or(0)));
  }
  const StepFlops flops =
      drafter_step_flops(dims, pairs, false, TrunkPolicy::per_layer, LossPolicy::chunk_grad_in_forward);

  std::cout << "config " << o.config << ": T " << dims.T << " (" << dims.N << " blocks of " << dims.B << "), S "
            << dims.S << ", H " << dims.H << ", I " << dims.I << ", heads " << dims.nh << "/" << dims.nkv << ", d "
            << dims.d << ", L " << dims.L << ", V " << dims.V << "; model FLOPs per step " << flops.model()
            << " (attention " << flops.attention() << ")\n";
  if (o.count) {  // ci/gpu's plan: lines "count <loss policy> <executed FLOPs> <attention FLOPs executed>"
    for (const LossPolicy p : {LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward}) {
      const StepFlops f = drafter_step_flops(dims, pairs, false, TrunkPolicy::per_layer, p);
      std::cout << "count " << loss_policy_name(p) << " " << f.executed() << " " << f.attention_executed() << "\n";
    }
    std::cout << "count steps " << o.reps + 1 << "\ncount step_attention "
              << (kDrafterStepAttentionForward == AttentionForwardKernel::cuda_cores ? "cuda_cores" : "tensor_cores")
              << "\n";
    return 0;
  }
  const CudaDeviceStatus& gpu = cuda_device_status();
  if (!gpu.available) {
    std::cout << "bench_cuda_drafter_step: SKIPPED, " << gpu.summary() << "\n";
    return gpu_required() ? 1 : 0;
  }
  std::cout << "device: " << gpu.summary() << "\n";
  DeviceAllocator allocator;
  const GemmRate card = measure_card_rate(allocator, o.seed);
  allocator.release_cached_memory();
  LinearGemm gemm(allocator);
  const CudaBackend backend{allocator, gemm};
  DeviceModel model(backend, config, o.seed);
  const DeviceSequence seq(backend, dims, rows, o.seed);

  std::vector<PolicyRun> runs;
  std::vector<std::string> wrong, missed;
  // The step's attention kernels, and the third run with both switched to the other kind.
  const AttentionForwardKernel step_forward = backend.attention_forward_kernel;
  const AttentionBackwardKernel step_backward = backend.attention_backward_kernel;
  const AttentionForwardKernel other_forward = step_forward == AttentionForwardKernel::cuda_cores
                                                   ? AttentionForwardKernel::tensor_cores_where_supported
                                                   : AttentionForwardKernel::cuda_cores;
  const AttentionBackwardKernel other_backward = step_backward == AttentionBackwardKernel::cuda_cores
                                                     ? AttentionBackwardKernel::tensor_cores_where_supported
                                                     : AttentionBackwardKernel::cuda_cores;
  const std::tuple<LossPolicy, AttentionForwardKernel, AttentionBackwardKernel> measured[] = {
      {LossPolicy::chunk_recompute, step_forward, step_backward},
      {LossPolicy::chunk_grad_in_forward, step_forward, step_backward},
      {LossPolicy::chunk_recompute, other_forward, other_backward}};
  for (const auto& [p, kernel, backward_kernel] : measured) {
    PolicyRun planned;
    planned.policy = p;
    planned.attention_forward = kernel;
    planned.attention_backward = backward_kernel;
    const std::string name = planned.name();
    try {
      PolicyRun r = run_policy(backend, config, dims, model, seq, rows.weight_sum, p, o.reps, kernel, backward_kernel);
      r.step_kernels = kernel == step_forward && backward_kernel == step_backward;
      if (!std::isfinite(r.stats.loss)) wrong.push_back(str(name, ": loss ", r.stats.loss));
      for (double l : r.losses) {
        if (std::memcmp(&l, &r.losses.front(), sizeof l) != 0) {
          wrong.push_back(str(name, ": losses differ between runs (", r.losses.front(), " vs ", l, ")"));
          break;
        }
      }
      for (std::size_t i = 0; i < r.grad_norms.size(); ++i) {
        if (!std::isfinite(r.grad_norms[i]))
          wrong.push_back(str(name, ": gradient of ", model.names[i], " not finite"));
      }
      // the targets are the step's: the run with the other attention kernels is not held to them
      const double tflops = flops.model() / (r.median_ms() * 1e-3) / 1e12;
      if (r.step_kernels) {
        for (const std::string& m : step_target_misses(tflops, card.tflops(), r.memory))
          missed.push_back(name + ": " + m);
      }
      runs.push_back(std::move(r));
    } catch (const std::exception& e) {
      wrong.push_back(str(name, ": ", e.what()));
      std::cout << name << " FAILED: " << e.what() << "\n";
    }
  }

  std::printf("\n%s: %.3f ms, %.1f TFLOP/s (datasheet %.0f)\n", card.what.c_str(), card.ms, card.tflops(),
              kHopperSxmDatasheetBf16Tflops);
  std::printf("%-54s %9s %9s %8s %8s %10s %10s %9s %9s %9s %9s %11s\n", "policy", "ms step", "model TF", "MFU card",
              "MFU peak", "attn fwd ms", "attn bwd ms", "fwd TF", "bwd TF", "attn TF", "exec TF", "loss");
  for (const PolicyRun& r : runs) {
    const double s = r.median_ms() * 1e-3, af = PolicyRun::median(r.attention_forward_ms),
                 ab = PolicyRun::median(r.attention_backward_ms);
    const StepFlops f = drafter_step_flops(dims, pairs, false, TrunkPolicy::per_layer, r.policy);
    std::printf("%-54s %9.1f %9.1f %7.1f%% %7.1f%% %10.1f %10.1f %9.1f %9.1f %9.1f %9.1f %11.6f\n", r.name().c_str(),
                r.median_ms(), flops.model() / s / 1e12, 100 * flops.model() / s / 1e12 / card.tflops(),
                100 * flops.model() / s / 1e12 / kHopperSxmDatasheetBf16Tflops, af, ab,
                (f.attention_forward + f.attention_recompute) / (af * 1e-3) / 1e12,
                f.attention_backward / (ab * 1e-3) / 1e12, f.attention_executed() / ((af + ab) * 1e-3) / 1e12,
                f.executed() / s / 1e12, r.stats.loss);
    std::printf("  memory (GiB)   %-12s %9s %9s\n", "category", "measured", "planned");
    for (const CategoryComparison& c : r.memory) {
      if (c.planned == 0 && c.measured == 0) continue;
      std::printf("                 %-12s %9s %9s\n", std::string(category_name(c.category)).c_str(),
                  gib(c.measured).c_str(), gib(c.planned).c_str());
    }
    std::printf("                 %-12s %9s %9s (peak of the sum; the plan's total adds category peaks)\n", "total",
                gib(r.peak_total).c_str(), gib(r.planned_total).c_str());
  }
  if (!o.json.empty()) write_json(o.json, o, gpu, dims, card, flops, pairs, rows, model.names, runs);

  if (runs.size() < std::size(measured)) missed.push_back("not every policy was measured");
  return report_verdicts(missed, wrong);
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) {
  return dflash::run_benchmark("bench_cuda_drafter_step", dflash::bench_main, argc, argv);
}
