// One training step of the DFlash drafter on a batch (SPEC §2–§7): anchors and targets per
// sequence, the trunk (reference/drafter_trunk.hpp) under a trunk policy, the loss head
// (reference/loss_head.hpp) under a loss policy, and the backward to every trainable parameter
// and to the target features. Parameters are never updated: this is one step's gradient.
//
// Sequences run one after another (forward, loss head, backward), accumulating the parameter
// gradients in sequence order; the loss is normalised by the global weight sum W, which is the
// whole batch's unless the caller passes the global one (several ranks or micro-steps, SPEC §5).
// Compiled for double in drafter.cpp; the 50-digit instantiation is declared in drafter_mp50.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "reference/anchors.hpp"
#include "reference/drafter_batch.hpp"
#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"
#include "reference/drafter_trunk.hpp"
#include "reference/dropout.hpp"
#include "reference/loss_head.hpp"
#include "reference/trunk_policy.hpp"

namespace dflash {

// Told during a backward that the parameter gradients from position `first` on (GradientsFinal,
// reference/drafter_trunk.hpp) are final for the sequence of global index `sequence`.
using GradientsFinalObserver = std::function<void(std::uint32_t sequence, std::size_t first)>;

struct DrafterStepOptions {
  std::uint32_t step = 0;             // optimizer step: the RNG counter's last word (SPEC §6)
  std::uint32_t sequence_offset = 0;  // global index of the batch's sequence 0 (never the rank)
  TrunkPolicy trunk_policy = TrunkPolicy::per_layer;
  std::int64_t checkpoint_every = 1;  // k of every_k
  LossPolicy loss_policy = LossPolicy::chunk_recompute;
  std::int64_t loss_chunk_rows = 2048;
  const DropoutObserver* dropout_observer = nullptr;        // sees every dropout draw (tests)
  const GradientsFinalObserver* gradients_final = nullptr;  // a training step reduces what backward finished
};

// The policies and chunk rows of the config's training fields.
inline DrafterStepOptions drafter_step_options(const DrafterConfig& config, std::uint32_t step = 0,
                                               std::uint32_t sequence_offset = 0) {
  DrafterStepOptions o;
  o.step = step;
  o.sequence_offset = sequence_offset;
  o.trunk_policy = config.trunk_policy;
  o.checkpoint_every = config.checkpoint_every;
  o.loss_policy = config.loss_policy;
  o.loss_chunk_rows = config.loss_chunk_rows;
  return o;
}

// What a forward reports (the golden files' outputs, SPEC §9).
template <class Real>
struct DrafterOutputs {
  LossHeadStats<Real> stats;     // loss, ce, kl (each over W), correct and valid rows -> accuracy
  Real weight_sum{0};            // W the loss was divided by
  Tensor<std::int64_t> anchors;  // [nseq, N] as used (explicit or sampled)
  Tensor<std::uint8_t> keep;     // [nseq, N]
  Tensor<Real> hidden;           // Y [nseq, T, H]
  Tensor<Real> lse;              // [nseq, T] logsumexp(z) where w01 = 1, else 0
  Tensor<Real> token_loss;       // [nseq, T] l_i where w01 = 1, else 0
  Tensor<Real> weights;          // [nseq, T] w_i
  // [nseq, T] w01, and 1 where w01 = 1 and argmax z = y (the loss head's, lowest index on ties):
  // what the block statistics need (TRAINING §17). Not tracked: two bytes per row.
  std::vector<std::uint8_t> labelled;
  std::vector<std::uint8_t> hits;
};

template <class Real>
struct DrafterStepResult {
  DrafterOutputs<Real> outputs;
  DrafterParameters<Real> grads;      // dL/d(parameter), by Hugging Face name (MemoryCategory::gradients)
  Tensor<Real> target_features_grad;  // dL/dF [nseq, S, K H]
};

// One sequence of a batch made ready for the trunk and the loss head: its anchor slots (stored or
// sampled, SPEC §4) and its block rows (tokens, positions, labels, weights, w01, teacher rows).
// Public so that other consumers (golden files' loss-head check) build exactly the same rows.
template <class Real>
struct PreparedSequence {
  AnchorSlots slots;
  SequenceBlocks<Real> blocks;
};

template <class Real>
std::vector<PreparedSequence<Real>> prepare_sequences(const DrafterConfig& config, const DrafterBatch<Real>& batch,
                                                      const DrafterStepOptions& options) {
  std::vector<PreparedSequence<Real>> seqs;
  for (std::int64_t b = 0; b < batch.num_sequences(); ++b) {
    AnchorSlots slots = batch_anchor_slots(config, batch, b, options.step, options.sequence_offset);
    SequenceBlocks<Real> blocks =
        sequence_blocks<Real>(batch.sequence_tokens(b), batch.sequence_loss_mask(b), slots, config.block_size,
                              config.mask_token_id, config.loss_decay_gamma);
    seqs.push_back({std::move(slots), std::move(blocks)});
  }
  return seqs;
}

namespace drafter_detail {

// W of the prepared sequences, summed in sequence order, rows ascending.
template <class Real>
Real total_weight(const std::vector<PreparedSequence<Real>>& seqs) {
  Real total(0);
  for (const PreparedSequence<Real>& s : seqs) {
    for (const Real& w : s.blocks.weights) total += w;
  }
  return total;
}

// Row p of sequence b of the teacher hidden states G [nseq, S, H].
template <class Real>
const Real* teacher_row(const DrafterBatch<Real>& batch, std::int64_t b, std::int64_t p) {
  return batch.teacher_hidden.data() + (b * batch.context_length() + p) * batch.teacher_hidden.dim(2);
}

// Only the teacher rows a label uses must be finite (SPEC §4: nothing may depend on the others).
// G [nseq, S, H] at `g`; value_of turns an element into the number it stands for (G may be held as
// bf16 bits: distributed/rank_sequences.hpp). Each row of G is checked once, at the first block row
// that reads it (block rows read a row of G about 8 times at full scale: 32768 block rows, 4096
// rows), so the first bad element named is the one a check of every block row in order meets first.
template <class Real, class Element, class ValueOf>
void validate_teacher_rows_of(const Element* g, std::int64_t S, std::int64_t H,
                              const std::vector<PreparedSequence<Real>>& seqs, ValueOf value_of) {
  std::vector<std::uint8_t> checked;
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    const SequenceBlocks<Real>& blocks = seqs[b].blocks;
    checked.assign(static_cast<std::size_t>(S), 0);
    for (std::size_t i = 0; i < blocks.valid.size(); ++i) {
      if (blocks.valid[i] == 0) continue;
      const std::int64_t p = blocks.teacher_rows[i];
      if (p >= 0 && p < S) {
        if (checked[static_cast<std::size_t>(p)] != 0) continue;
        checked[static_cast<std::size_t>(p)] = 1;
      }
      const Element* row = g + (std::int64_t(b) * S + p) * H;
      for (std::int64_t c = 0; c < H; ++c) {
        if (is_finite_value(value_of(row[c]))) continue;
        throw_input_error(str("teacher_hidden[", b, "][", blocks.teacher_rows[i], "]"),
                          str("element ", c, " is ", value_of(row[c]), "; rows that carry a teacher must be finite"));
      }
    }
  }
}
template <class Real>
void validate_teacher_rows(const DrafterBatch<Real>& batch, const std::vector<PreparedSequence<Real>>& seqs) {
  validate_teacher_rows_of(batch.teacher_hidden.data(), batch.context_length(), batch.teacher_hidden.dim(2), seqs,
                           [](const Real& v) -> const Real& { return v; });
}

}  // namespace drafter_detail

// Teacher row of block row i: G[a_n + k - 1] where w01 = 1, else 0 (never read).
template <class Real>
Tensor<Real> gather_teacher_rows(MemoryTracker& tracker, const DrafterBatch<Real>& batch, std::int64_t b,
                                 const SequenceBlocks<Real>& blocks) {
  const std::int64_t H = batch.teacher_hidden.dim(2);
  const auto T = static_cast<std::int64_t>(blocks.valid.size());
  Tensor<Real> teacher(tracker, MemoryCategory::inputs, {T, H});
  for (std::int64_t i = 0; i < T; ++i) {
    if (blocks.valid[i] == 0) continue;
    const Real* g = drafter_detail::teacher_row(batch, b, blocks.teacher_rows[i]);
    std::copy(g, g + H, teacher.row(i));
  }
  return teacher;
}

namespace drafter_detail {

template <class Real>
void copy_row(const Tensor<Real>& from, Tensor<Real>& to, std::int64_t at) {
  std::copy(from.data(), from.data() + from.numel(), to.data() + at * from.numel());
}

}  // namespace drafter_detail

// The step options' checks (policies, loss options; InputError names the problem); returns the
// loss head's options for the step.
inline LossHeadOptions validate_drafter_step_options(const DrafterConfig& config, const DrafterStepOptions& options) {
  trunk_segment_length(options.trunk_policy, options.checkpoint_every, config.num_hidden_layers);  // validates k
  LossHeadOptions loss_options = config.loss_head_options();
  loss_options.policy = options.loss_policy;
  loss_options.chunk_rows = options.loss_chunk_rows;
  validate_loss_head_options(loss_options);
  return loss_options;
}

// Every check a step runs before computing anything (config, parameters, batch, policies, loss
// options; InputError names the problem); returns the loss head's options for the step.
template <class Real>
LossHeadOptions validate_drafter_step(const DrafterConfig& config, const DrafterParameters<Real>& params,
                                      const FrozenWeights<Real>& frozen, const DrafterBatch<Real>& batch,
                                      const DrafterStepOptions& options) {
  validate_drafter_config(config);
  validate_drafter_parameters(config, params, frozen);
  validate_drafter_batch(config, batch, options.sequence_offset);
  return validate_drafter_step_options(config, options);
}

namespace drafter_detail {

// The forward of every sequence, and (with grads) its backward: parameter gradients added into
// *grads (in place, so that a GradientsFinal observer reads them there), dL/dF into *features_grad.
template <class Real>
DrafterOutputs<Real> run_drafter(MemoryTracker& tracker, const DrafterConfig& config,
                                 const DrafterParameters<Real>& params, const FrozenWeights<Real>& frozen,
                                 const DrafterBatch<Real>& batch, const DrafterStepOptions& options,
                                 const std::optional<Real>& global_weight_sum, DrafterParameters<Real>* grads,
                                 Tensor<Real>* features_grad) {
  const LossHeadOptions loss_options = validate_drafter_step(config, params, frozen, batch, options);
  const std::vector<PreparedSequence<Real>> seqs = prepare_sequences(config, batch, options);
  validate_teacher_rows(batch, seqs);
  if (grads != nullptr)
    *features_grad = Tensor<Real>(tracker, MemoryCategory::gradients, batch.target_features.shape());
  const std::int64_t nseq = batch.num_sequences(), S = batch.context_length(), H = config.hidden_size;
  const std::int64_t N = batch.anchor_slots(config);
  const DrafterDims dims = DrafterDims::of(config, S, N);
  const std::int64_t T = dims.T;

  // The anchor slots the step runs on, [nseq, N] in MemoryCategory::inputs: the batch's own when
  // explicit; when sampled (SPEC §4), held here, so the tracker sees them either way (the memory
  // plan counts 8 + 1 B per slot).
  std::optional<Tensor<std::int64_t>> sampled_anchors;
  std::optional<Tensor<std::uint8_t>> sampled_keep;
  if (!batch.anchors) {
    sampled_anchors.emplace(tracker, MemoryCategory::inputs, Shape{nseq, N});
    sampled_keep.emplace(tracker, MemoryCategory::inputs, Shape{nseq, N});
    for (std::int64_t b = 0; b < nseq; ++b) {
      std::copy(seqs[b].slots.anchors.begin(), seqs[b].slots.anchors.end(), sampled_anchors->row(b));
      std::copy(seqs[b].slots.keep.begin(), seqs[b].slots.keep.end(), sampled_keep->row(b));
    }
  }
  const Tensor<std::int64_t>& anchors = batch.anchors ? *batch.anchors : *sampled_anchors;
  const Tensor<std::uint8_t>& keep = batch.keep ? *batch.keep : *sampled_keep;
  auto anchors_of = [&](std::int64_t b) { return std::span<const std::int64_t>(anchors.row(b), std::size_t(N)); };
  auto keep_of = [&](std::int64_t b) { return std::span<const std::uint8_t>(keep.row(b), std::size_t(N)); };

  DrafterOutputs<Real> out{{},
                           Real(0),
                           Tensor<std::int64_t>(tracker, MemoryCategory::outputs, {nseq, N}),
                           Tensor<std::uint8_t>(tracker, MemoryCategory::outputs, {nseq, N}),
                           Tensor<Real>(tracker, MemoryCategory::outputs, {nseq, T, H}),
                           Tensor<Real>(tracker, MemoryCategory::outputs, {nseq, T}),
                           Tensor<Real>(tracker, MemoryCategory::outputs, {nseq, T}),
                           Tensor<Real>(tracker, MemoryCategory::outputs, {nseq, T}),
                           std::vector<std::uint8_t>(static_cast<std::size_t>(nseq * T), 0),
                           std::vector<std::uint8_t>(static_cast<std::size_t>(nseq * T), 0)};
  for (std::int64_t b = 0; b < nseq; ++b) {
    const PreparedSequence<Real>& s = seqs[b];
    std::copy(anchors_of(b).begin(), anchors_of(b).end(), out.anchors.row(b));
    std::copy(keep_of(b).begin(), keep_of(b).end(), out.keep.row(b));
    std::copy(s.blocks.weights.begin(), s.blocks.weights.end(), out.weights.row(b));
    std::copy(s.blocks.valid.begin(), s.blocks.valid.end(), out.labelled.begin() + b * T);
  }
  out.weight_sum = global_weight_sum ? *global_weight_sum : total_weight(seqs);

  for (std::int64_t b = 0; b < nseq; ++b) {
    const PreparedSequence<Real>& s = seqs[b];
    const TrunkInputs<Real> in{
        dims,
        batch.target_features.data() + b * S * dims.feature_width(),
        anchors_of(b),
        keep_of(b),
        s.blocks.input_tokens,
        s.blocks.positions,
        DropoutCoordinates{config.seed, options.step, options.sequence_offset + static_cast<std::uint32_t>(b),
                           DropoutPass::forward, options.dropout_observer}};
    SequenceTrunk<Real> trunk(tracker, config, params, frozen, in, options.trunk_policy, options.checkpoint_every);
    Tensor<Real> y = trunk.forward(grads != nullptr);
    copy_row(y, out.hidden, b);

    const Tensor<Real> teacher = gather_teacher_rows(tracker, batch, b, s.blocks);
    const LossHeadTargets<Real> targets{&teacher,        &frozen.lm_head,  nullptr,
                                        s.blocks.labels, s.blocks.weights, s.blocks.valid};
    LossHeadForward<Real> f = loss_head_forward(tracker, loss_options, y, targets, out.weight_sum);
    y.release();
    copy_row(f.lse, out.lse, b);
    copy_row(f.token_loss, out.token_loss, b);
    std::copy(f.hits.begin(), f.hits.end(), out.hits.begin() + b * T);
    out.stats.merge(f.stats);  // finished over the global W: sequences add
    if (grads == nullptr) continue;

    LossHeadGradients<Real> g = loss_head_backward(tracker, loss_options, targets, std::move(f.saved));
    GradientsFinal on_final;
    if (options.gradients_final != nullptr) {
      const std::uint32_t sequence = options.sequence_offset + static_cast<std::uint32_t>(b);
      on_final = [&observer = *options.gradients_final, sequence](std::size_t first) { observer(sequence, first); };
    }
    const Tensor<Real> d_features = trunk.backward(std::move(g.hidden_grad), *grads, on_final);
    copy_row(d_features, *features_grad, b);
  }
  return out;
}

}  // namespace drafter_detail

// Forward only: outputs and loss statistics, nothing kept for a backward (the 50-digit finite
// differences run this).
template <class Real>
DrafterOutputs<Real> drafter_forward(MemoryTracker& tracker, const DrafterConfig& config,
                                     const DrafterParameters<Real>& params, const FrozenWeights<Real>& frozen,
                                     const DrafterBatch<Real>& batch, const DrafterStepOptions& options,
                                     const std::optional<Real>& global_weight_sum = std::nullopt) {
  return drafter_detail::run_drafter(tracker, config, params, frozen, batch, options, global_weight_sum,
                                     static_cast<DrafterParameters<Real>*>(nullptr),
                                     static_cast<Tensor<Real>*>(nullptr));
}

// Forward and backward: outputs, every parameter's gradient and dL/dF.
template <class Real>
DrafterStepResult<Real> drafter_step(MemoryTracker& tracker, const DrafterConfig& config,
                                     const DrafterParameters<Real>& params, const FrozenWeights<Real>& frozen,
                                     const DrafterBatch<Real>& batch, const DrafterStepOptions& options,
                                     const std::optional<Real>& global_weight_sum = std::nullopt) {
  DrafterStepResult<Real> r;
  r.grads = make_drafter_parameters<Real>(tracker, config, MemoryCategory::gradients);
  r.outputs = drafter_detail::run_drafter(tracker, config, params, frozen, batch, options, global_weight_sum, &r.grads,
                                          &r.target_features_grad);
  return r;
}

// Forward and backward, adding every parameter's gradient into `grads` (zero-filled or holding
// earlier sequences' sums; a training step sums over sequences and micro-steps this way, with no
// second gradient-sized buffer). Returns the outputs; dL/dF is made and freed inside.
template <class Real>
DrafterOutputs<Real> drafter_step_accumulate(MemoryTracker& tracker, const DrafterConfig& config,
                                             const DrafterParameters<Real>& params, const FrozenWeights<Real>& frozen,
                                             const DrafterBatch<Real>& batch, const DrafterStepOptions& options,
                                             const std::optional<Real>& global_weight_sum,
                                             DrafterParameters<Real>& grads) {
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
  std::size_t index = 0;
  bool matches = static_cast<std::int64_t>(grads.layers.size()) == config.num_hidden_layers;
  if (matches)
    grads.for_each(
        [&](const std::string&, const Tensor<Real>& t) { matches &= t.shape() == shapes.at(index++).shape; });
  if (!matches) throw_input_error("gradient accumulator", "its tensors do not have the config's parameter shapes");
  Tensor<Real> features_grad;
  return drafter_detail::run_drafter(tracker, config, params, frozen, batch, options, global_weight_sum, &grads,
                                     &features_grad);
}

// W of a batch: the sum of w over every block row of every sequence (what the step divides by
// when no global W is given). Ranks add theirs up for the global one.
template <class Real>
Real drafter_weight_sum(const DrafterConfig& config, const DrafterBatch<Real>& batch,
                        const DrafterStepOptions& options) {
  validate_drafter_config(config);
  validate_drafter_batch(config, batch, options.sequence_offset);
  return drafter_detail::total_weight(prepare_sequences(config, batch, options));
}

#define DFLASH_DRAFTER_INSTANTIATE(EXTERN, Real)                                                                   \
  EXTERN template DrafterOutputs<Real> drafter_forward(                                                            \
      MemoryTracker&, const DrafterConfig&, const DrafterParameters<Real>&, const FrozenWeights<Real>&,            \
      const DrafterBatch<Real>&, const DrafterStepOptions&, const std::optional<Real>&);                           \
  EXTERN template DrafterStepResult<Real> drafter_step(                                                            \
      MemoryTracker&, const DrafterConfig&, const DrafterParameters<Real>&, const FrozenWeights<Real>&,            \
      const DrafterBatch<Real>&, const DrafterStepOptions&, const std::optional<Real>&);                           \
  EXTERN template DrafterOutputs<Real> drafter_step_accumulate(                                                    \
      MemoryTracker&, const DrafterConfig&, const DrafterParameters<Real>&, const FrozenWeights<Real>&,            \
      const DrafterBatch<Real>&, const DrafterStepOptions&, const std::optional<Real>&, DrafterParameters<Real>&); \
  EXTERN template Real drafter_weight_sum(const DrafterConfig&, const DrafterBatch<Real>&, const DrafterStepOptions&);

DFLASH_DRAFTER_INSTANTIATE(extern, double)

}  // namespace dflash
