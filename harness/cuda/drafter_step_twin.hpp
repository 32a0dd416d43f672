// The whole drafter step four ways, for the GPU tests, properties and verify rows of
// cuda_drafter_step (tests/cuda/drafter/test_drafter_step_rule_gpu.cpp,
// properties/cuda/cuda_drafter_step_gpu_properties.cpp, verify/cuda_step_rows.cpp; no GoogleTest here):
//  - the problem in the device's formats (round_step_to_device_formats: weight matrices, E, W_lm,
//    F and G rounded to bf16 as the upload rounds them, norm weights to fp32), so that the double
//    reference (drafter_step) computes exactly on the device's inputs;
//  - the plain bf16 computation of SPEC §10 (plain_bf16_drafter_step): the step's own trunk code
//    (cuda/trunk/stack.hpp) on the CPU backend with bf16 storage, then the loss head's plain bf16
//    computation (reference/bf16_emulation.hpp) and the trunk's backward from its dL/dY, sequence by
//    sequence as cuda_drafter_step runs them;
//  - the device step's own code on the CPU (host_drafter_step): cuda_drafter_sequence_step with the
//    trunk on HostBackend<Bf16Bits> and the loss head's chunk loop on HostLossHeadBackend, under
//    every trunk and loss policy (tests/cuda/drafter/test_drafter_sequence_step_cpu.cpp);
//  - all of them as StepValues, held to the rule quantity by quantity (step_rule_lines).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/storage.hpp"
#include "common/tolerances.hpp"
#include "cuda/drafter/step.hpp"
#include "cuda/drafter/step_loop.hpp"
#include "cuda/loss_head/chunked_head.hpp"
#include "cuda/runtime/bf16_bits.hpp"
#include "cuda/trunk/stack.hpp"
#include "cuda/trunk/step_context.hpp"
#include "harness/cuda/device_formats.hpp"
#include "harness/cuda/host_backend.hpp"
#include "harness/cuda/host_loss_head_backend.hpp"
#include "io/errors.hpp"
#include "reference/bf16_emulation.hpp"
#include "reference/compare.hpp"
#include "reference/drafter.hpp"
#include "reference/drafter_problem.hpp"

namespace dflash {

// What a step returns, widened to double: the losses (loss, ce, kl over W), the row counts,
// every parameter's gradient (DrafterParameters order) and dL/dF.
struct StepValues {
  std::vector<double> losses;
  std::int64_t correct = 0, valid_rows = 0;
  std::vector<std::vector<double>> grads;
  std::vector<double> features_grad;
};

inline StepValues step_values(const LossHeadStats<double>& stats, const DrafterParameters<double>& grads,
                              const Tensor<double>& features_grad) {
  StepValues v{{stats.loss, stats.ce, stats.kl}, stats.correct, stats.valid_rows, {}, features_grad.values()};
  grads.for_each([&](const std::string&, const Tensor<double>& g) { v.grads.push_back(g.values()); });
  return v;
}
inline StepValues step_values(const CudaDrafterStepResult& r) {
  return step_values(r.stats, r.grads, r.target_features_grad);
}
inline StepValues step_values(const DrafterStepResult<double>& r) {
  return step_values(r.outputs.stats, r.grads, r.target_features_grad);
}

// Every value in one vector (losses, counts, gradients, dL/dF): for bitwise comparisons.
inline std::vector<double> flattened(const StepValues& v) {
  std::vector<double> all = v.losses;
  all.push_back(double(v.correct));
  all.push_back(double(v.valid_rows));
  for (const auto& g : v.grads) all.insert(all.end(), g.begin(), g.end());
  all.insert(all.end(), v.features_grad.begin(), v.features_grad.end());
  return all;
}

// The values the device computes on: matrices, E, W_lm, F and G in bf16, norm weights in fp32.
inline void round_step_to_device_formats(DrafterParameters<double>& params, FrozenWeights<double>& frozen,
                                         DrafterBatch<double>& batch) {
  round_parameters_to_device_formats(params);
  round_to_bf16_in_place(frozen.embed_tokens);
  round_to_bf16_in_place(frozen.lm_head);
  round_to_bf16_in_place(batch.target_features);
  round_to_bf16_in_place(batch.teacher_hidden);
}

// Two sequences of a config's drafter (the case's context, anchor slots, loss chunk and dropout
// rates; parameters seed 11 at scale 0.2, frozen weights seed 12, batch seed 5), in the device
// formats; the steps' options at step 3, sequence offset 1 (dropout streams other than the
// first), every_k with k = 2.
struct StepProblemCase {
  const char* config;  // file in configs/
  std::int64_t context_length, max_anchors, chunk_rows;
  double dropout;                 // both hidden sites, and the attention site unless set apart
  double attention_dropout = -1;  // >= 0: the attention site's own rate (a rate mixed up shows)

  double attention_rate() const { return attention_dropout < 0 ? dropout : attention_dropout; }
};

struct DeviceFormatStepProblem {
  MemoryTracker tracker;
  DrafterConfig config;
  DrafterParameters<double> params;
  FrozenWeights<double> frozen;
  DrafterBatch<double> batch;

  // `loaded`: the case's config file, read by the caller (tests and verify find configs/ apart).
  DeviceFormatStepProblem(DrafterConfig loaded, const StepProblemCase& c) : config(std::move(loaded)) {
    config.attention_dropout = c.attention_rate();
    config.hidden_dropout = c.dropout;
    config.max_anchors = c.max_anchors;
    config.loss_chunk_rows = c.chunk_rows;
    params = init_drafter_parameters<double>(tracker, config, 11, 0.2);
    frozen = init_frozen_weights<double>(tracker, config, 12);
    batch =
        make_drafter_batch<double>(tracker, config, {.sequences = 2, .context_length = c.context_length, .seed = 5});
    round_step_to_device_formats(params, frozen, batch);
  }

  DrafterStepOptions options(TrunkPolicy trunk, LossPolicy loss) const {
    DrafterStepOptions o = drafter_step_options(config, 3, 1);
    o.trunk_policy = trunk;
    o.checkpoint_every = 2;
    o.loss_policy = loss;
    return o;
  }
};

// The trunk's CPU backend as the device step runs the trunk: bf16 storage, the attention programs
// the device step takes (tensor-core ones with the mma emulated), buffers counted by `buffers`.
inline HostBackend<Bf16Bits> device_step_trunk_on_host(MemoryTracker& buffers) {
  HostBackend<Bf16Bits> be{buffers};
  be.attention_forward_kernel = kDrafterStepAttentionForward;
  be.attention_backward_kernel = kDrafterStepAttentionBackward;
  return be;
}

// The device step's own code on the CPU: drafter_step_on (cuda/drafter/step_loop.hpp: the uploads,
// cuda_drafter_sequence_step over the sequences, the gradients read back) after the same checks
// as cuda_drafter_step, on HostBackend<Bf16Bits> (the attention programs the device step takes,
// tensor-core ones with the mma emulated) and the loss head's chunk loop on HostLossHeadBackend,
// under `options`' trunk and loss policies. `params`, `frozen`, `batch` already in the device
// formats. `hits`, when given, receives each sequence's per-row flags; `memory`, when given, counts
// every buffer the backends hold (as the device allocator counts the device step's), nothing else;
// `global_weight_sum`, when given, is W (else the batch's), as cuda_drafter_step's.
inline StepValues host_drafter_step(const DrafterConfig& config, const DrafterParameters<double>& params,
                                    const FrozenWeights<double>& frozen, const DrafterBatch<double>& batch,
                                    const DrafterStepOptions& options,
                                    std::vector<std::vector<std::uint8_t>>* hits = nullptr,
                                    MemoryTracker* memory = nullptr,
                                    const std::optional<double>& global_weight_sum = std::nullopt) {
  const CheckedDrafterStep c = check_drafter_step(config, params, frozen, batch, options, global_weight_sum);
  MemoryTracker host;  // the host's own tensors (gathered teacher rows, the result)
  MemoryTracker own;
  MemoryTracker& buffers = memory != nullptr ? *memory : own;
  const HostBackend<Bf16Bits> be = device_step_trunk_on_host(buffers);
  ChunkedLossHead<HostLossHeadBackend> head(HostLossHeadBackend{buffers}, c.loss_options);
  return step_values(
      drafter_step_on(be, head, host, config, params, frozen, batch, options, c.seqs, c.weight_sum, hits));
}

// The device step's loop (drafter_sequences_on) on the CPU backends (device_step_trunk_on_host and
// the loss head's chunk loop), buffers counted by `buffers`, over weights already there: forward and
// backward of each sequence, or (backward false) the forward alone as cuda_drafter_forward_sequences
// runs it (evaluation: chunk_recompute whatever loss_options says, no gradient made).
inline LossHeadStats<double> host_drafter_sequences(
    MemoryTracker& buffers, MemoryTracker& host, const DrafterConfig& config, const CudaDrafterWeights& weights,
    const DrafterBatch<double>& batch, const DrafterStepOptions& options, LossHeadOptions loss_options,
    const std::vector<PreparedSequence<double>>& seqs, double weight_sum, bool backward,
    std::vector<std::vector<std::uint8_t>>* hits, const Bf16Features* bf16 = nullptr) {
  const HostBackend<Bf16Bits> be = device_step_trunk_on_host(buffers);
  if (!backward) loss_options.policy = LossPolicy::chunk_recompute;
  ChunkedLossHead<HostLossHeadBackend> head(HostLossHeadBackend{buffers}, loss_options);
  return drafter_sequences_on(be, head, host, config, weights, batch, options, seqs, weight_sum, backward, nullptr,
                              hits, bf16);
}

// The forward alone of the device step's code on the CPU, as cuda_drafter_forward_sequences runs it
// after the same checks: the statistics summed over the sequences, `hits` as host_drafter_step's.
inline LossHeadStats<double> host_drafter_forward(const DrafterConfig& config, const DrafterParameters<double>& params,
                                                  const FrozenWeights<double>& frozen,
                                                  const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                                  std::vector<std::vector<std::uint8_t>>* hits = nullptr) {
  const CheckedDrafterStep c = check_drafter_step(config, params, frozen, batch, options);
  MemoryTracker host, buffers;
  const StepWeights<HostBackend<Bf16Bits>> device(device_step_trunk_on_host(buffers), config, params, frozen);
  const LossHeadStats<double> stats = host_drafter_sequences(buffers, host, config, device.weights, batch, options,
                                                             c.loss_options, c.seqs, c.weight_sum, false, hits);
  for (const auto& g : device.parameters.grads) {
    for (std::size_t e = 0; e < g.size(); ++e) {
      if (g.data()[e] != 0.0f) throw std::logic_error("the forward alone changed a gradient");
    }
  }
  return stats;
}

// The plain bf16 step on `params`, `frozen`, `batch` (already in the device formats).
inline StepValues plain_bf16_drafter_step(const DrafterConfig& config, const DrafterParameters<double>& params,
                                          const FrozenWeights<double>& frozen, const DrafterBatch<double>& batch,
                                          const DrafterStepOptions& options) {
  using Storage = Bf16Bits;
  MemoryTracker host;
  HostBackend<Storage> be{host};
  // The plain computation of what the device step runs: where it takes the tensor-core attention
  // forward, f P is a bf16 product operand there, so it is here; where it takes the tensor-core
  // backward, f P and dS are.
  be.round_attention_forward_operands =
      kDrafterStepAttentionForward == AttentionForwardKernel::tensor_cores_where_supported;
  be.round_attention_product_operands =
      kDrafterStepAttentionBackward == AttentionBackwardKernel::tensor_cores_where_supported;
  const CheckedDrafterStep checked = check_drafter_step(config, params, frozen, batch, options);
  const LossHeadOptions& loss_options = checked.loss_options;
  const std::vector<PreparedSequence<double>>& seqs = checked.seqs;
  const double weight_sum = checked.weight_sum;
  const std::int64_t nseq = batch.num_sequences(), S = batch.context_length();
  const DrafterDims dims = DrafterDims::of(config, S, batch.anchor_slots(config));
  // Its own uploads, not step_loop.hpp's: a judge that shared the production path's inputs would
  // share its bugs (every sequence given the first one's F passed the rule when it did).
  auto narrowed = [](const double* x, std::int64_t n) {
    std::vector<Storage> out(static_cast<std::size_t>(n));
    for (std::size_t e = 0; e < out.size(); ++e) narrow_into(static_cast<float>(x[e]), out[e]);
    return out;
  };
  std::vector<HostBuffer<Storage>> matrices;
  std::vector<HostBuffer<float>> vectors, grads;
  std::vector<const void*> values;
  params.for_each([&](const std::string&, const Tensor<double>& t) {
    if (t.rank() == 2) {
      matrices.push_back(be.from_host(MemoryCategory::parameters, narrowed(t.data(), t.numel())));
      values.push_back(matrices.back().data());
    } else {
      vectors.push_back(
          be.from_host(MemoryCategory::parameters, std::vector<float>(t.values().begin(), t.values().end())));
      values.push_back(vectors.back().data());
    }
    grads.push_back(be.from_host(MemoryCategory::gradients, std::vector<float>(t.values().size(), 0.0f)));
  });
  std::vector<float*> grad_of;
  for (auto& grad : grads) grad_of.push_back(grad.data());
  const auto embed =
      be.from_host(MemoryCategory::frozen, narrowed(frozen.embed_tokens.data(), frozen.embed_tokens.numel()));
  TrunkWeights<Storage> w;
  TrunkGrads g;
  bind_trunk_parameters(config, values, grad_of, embed.data(), w, g);
  std::vector<std::int64_t> context_positions(static_cast<std::size_t>(S));
  for (std::int64_t j = 0; j < S; ++j) context_positions[static_cast<std::size_t>(j)] = j;
  const auto ctx_pos = be.from_host(MemoryCategory::inputs, context_positions);

  StepValues out;
  LossHeadStats<double> stats;
  for (std::int64_t b = 0; b < nseq; ++b) {
    const PreparedSequence<double>& s = seqs[static_cast<std::size_t>(b)];
    const std::int64_t KH = dims.feature_width();
    const auto anchors = be.from_host(MemoryCategory::inputs, s.slots.anchors);
    const auto keep = be.from_host(MemoryCategory::inputs, s.slots.keep);
    const auto positions = be.from_host(MemoryCategory::inputs, s.blocks.positions);
    const auto tokens = be.from_host(MemoryCategory::inputs, s.blocks.input_tokens);
    const auto features =
        be.from_host(MemoryCategory::inputs, narrowed(batch.target_features.data() + b * S * KH, S * KH));
    auto d_features =
        be.from_host(MemoryCategory::gradients, std::vector<float>(static_cast<std::size_t>(S * KH), 0.0f));
    g.target_features = d_features.data();

    const TrunkLayerContext<Storage> ctx =
        step_layer_context<Storage>(config, dims, options, options.sequence_offset + static_cast<std::uint32_t>(b),
                                    anchors.data(), keep.data(), positions.data(), ctx_pos.data());
    Trunk<HostBackend<Storage>> trunk(be, w, ctx, dims.K, features.data(), tokens.data(), TrunkPolicy::per_layer, 1);

    // The loss head's plain computation on this Y (bf16, as the trunk stores it) and the targets
    // in the device formats, with the batch's W (as cuda_drafter_step passes it).
    const std::vector<Storage> y = be.to_host(trunk.forward());
    Tensor<double> hidden(host, MemoryCategory::outputs, {dims.T, dims.H});
    for (std::int64_t e = 0; e < hidden.numel(); ++e) hidden[e] = widen(y[static_cast<std::size_t>(e)]);
    LossHeadProblem<double> exact_inputs{std::move(hidden),
                                         gather_teacher_rows(host, batch, b, s.blocks),
                                         frozen.lm_head.clone(host, MemoryCategory::frozen),
                                         s.blocks.labels,
                                         s.blocks.weights,
                                         s.blocks.valid,
                                         weight_sum};
    LossHeadProblem<double> problem = round_to_device_formats(host, exact_inputs);
    problem.weight_sum = static_cast<float>(weight_sum);
    const Bf16Emulation e = hybrid_loss_bf16_emulation(host, loss_options, problem);
    stats.merge(e.result.stats);
    const Tensor<double>& dy = e.result.hidden_grad;
    trunk.backward(be.from_host(MemoryCategory::transient, std::vector<float>(dy.values().begin(), dy.values().end())),
                   g);
    out.features_grad.insert(out.features_grad.end(), d_features.data(), d_features.data() + d_features.size());
  }
  out.losses = {stats.loss, stats.ce, stats.kl};
  out.correct = stats.correct;
  out.valid_rows = stats.valid_rows;
  for (const auto& grad : grads) out.grads.emplace_back(grad.data(), grad.data() + grad.size());
  return out;
}

// One quantity under SPEC §10: error (norm-wise, reference/compare.hpp) <= 2 x the plain
// computation's error + floor.
struct RuleLine {
  std::string name;
  double error = 0, plain_error = 0, bound = 0;
  bool ok() const { return error <= bound; }
};

inline RuleLine rule_line(std::string name, const std::vector<double>& got, const std::vector<double>& plain,
                          const std::vector<double>& exact, double floor) {
  const double error = relative_error(std::span(got), std::span(exact));
  const double plain_error = relative_error(std::span(plain), std::span(exact));
  return {std::move(name), error, plain_error, kPlainErrorFactor * plain_error + floor};
}

// The losses (norm-wise over loss, ce, kl), every gradient and dL/dF, each with the fp32 floor
// kFp32Floor (common/tolerances.hpp; the trunk tests' kAttentionFp32Floor is the same 1e-5, derived
// for their sums). The labelled row count must match exactly.
inline std::vector<RuleLine> step_rule_lines(const DrafterParameters<double>& params, const StepValues& got,
                                             const StepValues& plain, const StepValues& exact) {
  const double floor = kFp32Floor;
  std::vector<RuleLine> lines;
  lines.push_back({"valid rows", double(got.valid_rows != exact.valid_rows), 0, 0});
  lines.push_back(rule_line("losses", got.losses, plain.losses, exact.losses, floor));
  std::size_t at = 0;
  params.for_each([&](const std::string& name, const Tensor<double>&) {
    lines.push_back(rule_line(name, got.grads[at], plain.grads[at], exact.grads[at], floor));
    ++at;
  });
  lines.push_back(rule_line("dL/dF", got.features_grad, plain.features_grad, exact.features_grad, floor));
  return lines;
}

// max over quantities of error / bound (<= 1 passes; a nonzero error against a zero bound is
// infinite).
inline double worst_ratio(const std::vector<RuleLine>& lines) {
  double worst = 0;
  for (const RuleLine& l : lines) {
    const double r = l.bound > 0 ? l.error / l.bound : (l.error > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    worst = std::max(worst, r);
  }
  return worst;
}

inline std::string describe(const std::vector<RuleLine>& lines) {
  std::string out;
  for (const RuleLine& l : lines) {
    out +=
        str(l.name, ": error ", l.error, " plain ", l.plain_error, " bound ", l.bound, l.ok() ? "" : "  FAILS", "\n");
  }
  return out;
}

}  // namespace dflash
