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
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/storage.hpp"
#include "common/tolerances.hpp"
#include "cuda/drafter/sequence_step.hpp"
#include "cuda/drafter/step.hpp"
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
// rate at both hidden sites and the attention site; parameters seed 11 at scale 0.2, frozen
// weights seed 12, batch seed 5), in the device formats; the steps' options at step 3, sequence
// offset 1 (dropout streams other than the first), every_k with k = 2.
struct StepProblemCase {
  const char* config;  // file in configs/
  std::int64_t context_length, max_anchors, chunk_rows;
  double dropout;
};

struct DeviceFormatStepProblem {
  MemoryTracker tracker;
  DrafterConfig config;
  DrafterParameters<double> params;
  FrozenWeights<double> frozen;
  DrafterBatch<double> batch;

  // `loaded`: the case's config file, read by the caller (tests and verify find configs/ apart).
  DeviceFormatStepProblem(DrafterConfig loaded, const StepProblemCase& c) : config(std::move(loaded)) {
    config.attention_dropout = c.dropout;
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

// Doubles rounded to bf16 as the device's upload rounds them.
inline std::vector<Bf16Bits> bf16_rounded(const double* x, std::int64_t n) {
  std::vector<Bf16Bits> out(static_cast<std::size_t>(n));
  for (std::size_t e = 0; e < out.size(); ++e) narrow_into(static_cast<float>(x[e]), out[e]);
  return out;
}

// The step's weights in a CPU backend's memory as cuda_drafter_step puts them on the device:
// trainable matrices, E and W_lm in bf16, norm weights in fp32, one fp32 gradient buffer per
// parameter (zeros), bound per parameter (bind_trunk_parameters).
struct HostStepWeights {
  std::vector<HostBuffer<Bf16Bits>> matrices;
  std::vector<HostBuffer<float>> vectors, grads;
  HostBuffer<Bf16Bits> embed, lm_head;
  CudaDrafterWeights weights;

  HostStepWeights(const HostBackend<Bf16Bits>& be, const DrafterConfig& config, const DrafterParameters<double>& params,
                  const FrozenWeights<double>& frozen) {
    std::vector<const void*> values;
    params.for_each([&](const std::string&, const Tensor<double>& t) {
      if (t.rank() == 2) {
        matrices.push_back(be.from_host(MemoryCategory::parameters, bf16_rounded(t.data(), t.numel())));
        values.push_back(matrices.back().data());
      } else {
        vectors.push_back(
            be.from_host(MemoryCategory::parameters, std::vector<float>(t.values().begin(), t.values().end())));
        values.push_back(vectors.back().data());
      }
      grads.push_back(be.from_host(MemoryCategory::gradients, std::vector<float>(t.values().size(), 0.0f)));
    });
    std::vector<float*> grad_of;
    for (auto& g : grads) grad_of.push_back(g.data());
    embed = be.from_host(MemoryCategory::frozen, bf16_rounded(frozen.embed_tokens.data(), frozen.embed_tokens.numel()));
    lm_head = be.from_host(MemoryCategory::frozen, bf16_rounded(frozen.lm_head.data(), frozen.lm_head.numel()));
    weights.lm_head = lm_head.data();
    bind_trunk_parameters(config, values, grad_of, embed.data(), weights.trunk, weights.grads);
  }

  // Every gradient, in DrafterParameters order, widened.
  std::vector<std::vector<double>> gradients() const {
    std::vector<std::vector<double>> out;
    for (const auto& g : grads) out.emplace_back(g.data(), g.data() + g.size());
    return out;
  }
};

// One sequence's inputs in a CPU backend's memory as cuda_drafter_step uploads them.
struct HostStepSequence {
  HostBuffer<std::int64_t> anchors, positions, tokens, labels;
  HostBuffer<std::uint8_t> keep, valid;
  HostBuffer<Bf16Bits> features, teacher_rows;
  HostBuffer<float> weights, features_grad;

  HostStepSequence(const HostBackend<Bf16Bits>& be, MemoryTracker& host, const DrafterBatch<double>& batch,
                   std::int64_t b, const PreparedSequence<double>& s) {
    const MemoryCategory in = MemoryCategory::inputs;
    const std::int64_t SKH = batch.target_features.numel() / batch.num_sequences();
    anchors = be.from_host(in, s.slots.anchors);
    keep = be.from_host(in, s.slots.keep);
    positions = be.from_host(in, s.blocks.positions);
    tokens = be.from_host(in, s.blocks.input_tokens);
    features = be.from_host(in, bf16_rounded(batch.target_features.data() + b * SKH, SKH));
    const Tensor<double> teacher = gather_teacher_rows(host, batch, b, s.blocks);
    teacher_rows = be.from_host(in, bf16_rounded(teacher.data(), teacher.numel()));
    labels = be.from_host(in, s.blocks.labels);
    weights = be.from_host(in, std::vector<float>(s.blocks.weights.begin(), s.blocks.weights.end()));
    valid = be.from_host(in, s.blocks.valid);
    features_grad = be.from_host(MemoryCategory::gradients, std::vector<float>(static_cast<std::size_t>(SKH), 0.0f));
  }

  CudaSequenceInputs view(const HostBuffer<std::int64_t>& context_positions) {
    return {anchors.data(),      keep.data(),
            positions.data(),    context_positions.data(),
            tokens.data(),       features.data(),
            teacher_rows.data(), DeviceRowTargets{labels.data(), weights.data(), valid.data()},
            features_grad.data()};
  }
};

// The device step's own code on the CPU: cuda_drafter_sequence_step (cuda/drafter/sequence_step.hpp)
// over the batch's sequences as cuda_drafter_step runs it, on HostBackend<Bf16Bits> (the attention
// programs the device step takes, tensor-core ones with the mma emulated) and the loss head's chunk
// loop on HostLossHeadBackend, under `options`' trunk and loss policies. `params`, `frozen`, `batch`
// already in the device formats. `hits`, when given, receives each sequence's per-row flags;
// `memory`, when given, counts every buffer the backends hold (as the device allocator counts the
// device step's), and nothing else.
inline StepValues host_drafter_step(const DrafterConfig& config, const DrafterParameters<double>& params,
                                    const FrozenWeights<double>& frozen, const DrafterBatch<double>& batch,
                                    const DrafterStepOptions& options,
                                    std::vector<std::vector<std::uint8_t>>* hits = nullptr,
                                    MemoryTracker* memory = nullptr) {
  MemoryTracker scratch;  // the host's own tensors (the gathered teacher rows before upload)
  MemoryTracker own;
  MemoryTracker& host = memory != nullptr ? *memory : own;
  HostBackend<Bf16Bits> be{host};
  be.attention_forward_kernel = kDrafterStepAttentionForward;
  be.attention_backward_kernel = kDrafterStepAttentionBackward;
  const LossHeadOptions loss_options = validate_drafter_step(config, params, frozen, batch, options);
  const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, batch, options);
  drafter_detail::validate_teacher_rows(batch, seqs);
  const std::int64_t S = batch.context_length();
  const DrafterDims dims = DrafterDims::of(config, S, batch.anchor_slots(config));
  const double weight_sum = drafter_detail::total_weight(seqs);
  HostStepWeights w(be, config, params, frozen);
  std::vector<std::int64_t> context_positions(static_cast<std::size_t>(S));
  for (std::int64_t j = 0; j < S; ++j) context_positions[static_cast<std::size_t>(j)] = j;
  const auto ctx_pos = be.from_host(MemoryCategory::inputs, context_positions);
  ChunkedLossHead<HostLossHeadBackend> head(HostLossHeadBackend{host}, loss_options);

  StepValues out;
  LossHeadStats<double> stats;
  for (std::int64_t b = 0; b < batch.num_sequences(); ++b) {
    HostStepSequence seq(be, scratch, batch, b, seqs[static_cast<std::size_t>(b)]);
    const std::uint32_t sequence = options.sequence_offset + static_cast<std::uint32_t>(b);
    std::vector<std::uint8_t>* sequence_hits = hits != nullptr ? &hits->emplace_back() : nullptr;
    stats.merge(cuda_drafter_sequence_step(be, head, config, dims, w.weights, seq.view(ctx_pos), options, sequence,
                                           weight_sum, sequence_hits));
    out.features_grad.insert(out.features_grad.end(), seq.features_grad.data(),
                             seq.features_grad.data() + seq.features_grad.size());
  }
  out.losses = {stats.loss, stats.ce, stats.kl};
  out.correct = stats.correct;
  out.valid_rows = stats.valid_rows;
  out.grads = w.gradients();
  return out;
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
  const LossHeadOptions loss_options = validate_drafter_step(config, params, frozen, batch, options);
  const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, batch, options);
  const std::int64_t nseq = batch.num_sequences(), S = batch.context_length();
  const DrafterDims dims = DrafterDims::of(config, S, batch.anchor_slots(config));
  const double weight_sum = drafter_detail::total_weight(seqs);
  HostStepWeights weights(be, config, params, frozen);
  const TrunkWeights<Storage>& w = weights.weights.trunk;
  TrunkGrads g = weights.weights.grads;
  std::vector<std::int64_t> context_positions(static_cast<std::size_t>(S));
  for (std::int64_t j = 0; j < S; ++j) context_positions[static_cast<std::size_t>(j)] = j;
  const auto ctx_pos = be.from_host(MemoryCategory::inputs, context_positions);

  StepValues out;
  LossHeadStats<double> stats;
  for (std::int64_t b = 0; b < nseq; ++b) {
    const PreparedSequence<double>& s = seqs[static_cast<std::size_t>(b)];
    HostStepSequence seq(be, host, batch, b, s);
    g.target_features = seq.features_grad.data();

    const TrunkLayerContext<Storage> ctx =
        step_layer_context<Storage>(config, dims, options, options.sequence_offset + static_cast<std::uint32_t>(b),
                                    seq.anchors.data(), seq.keep.data(), seq.positions.data(), ctx_pos.data());
    Trunk<HostBackend<Storage>> trunk(be, w, ctx, dims.K, seq.features.data(), seq.tokens.data(),
                                      TrunkPolicy::per_layer, 1);

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
    out.features_grad.insert(out.features_grad.end(), seq.features_grad.data(),
                             seq.features_grad.data() + seq.features_grad.size());
  }
  out.losses = {stats.loss, stats.ce, stats.kl};
  out.correct = stats.correct;
  out.valid_rows = stats.valid_rows;
  out.grads = weights.gradients();
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
