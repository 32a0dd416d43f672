// A batch of nseq sequences of equal context length S (SPEC §2, laid out as the golden files
// store them), its validation, and the anchor slots of each sequence: given explicitly, or
// sampled per SPEC §4 from (seed, step, global sequence index).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common/dropout_rng.hpp"
#include "reference/anchors.hpp"
#include "reference/bf16_bits.hpp"
#include "reference/drafter_config.hpp"
#include "reference/loss_head_types.hpp"
#include "reference/tensor.hpp"

namespace dflash {

template <class Real>
struct DrafterBatch {
  Tensor<std::int64_t> tokens;                  // x [nseq, S]
  Tensor<std::uint8_t> loss_mask;               // m [nseq, S]
  Tensor<Real> target_features;                 // F [nseq, S, K H]
  Tensor<Real> teacher_hidden;                  // G [nseq, S, H]
  std::optional<Tensor<std::int64_t>> anchors;  // [nseq, N] explicit anchors (with keep); absent: sampled
  std::optional<Tensor<std::uint8_t>> keep;     // [nseq, N]

  std::int64_t num_sequences() const { return tokens.dim(0); }
  std::int64_t context_length() const { return tokens.dim(1); }
  // Anchor slots per sequence: explicit N, or the config's max_anchors when sampled.
  std::int64_t anchor_slots(const DrafterConfig& config) const {
    return anchors ? anchors->dim(1) : config.max_anchors;
  }

  std::span<const std::int64_t> sequence_tokens(std::int64_t b) const {
    return {tokens.row(b), size_t_of(tokens.dim(1))};
  }
  std::span<const std::uint8_t> sequence_loss_mask(std::int64_t b) const {
    return {loss_mask.row(b), size_t_of(loss_mask.dim(1))};
  }

 private:
  static std::size_t size_t_of(std::int64_t n) { return static_cast<std::size_t>(n); }
};

// A batch's F [nseq, S, K H] and G [nseq, S, H] rounded to bf16 (bf16_bits_into: what the CUDA
// step's upload does with the double values), held in the stead of the batch's own, which are then
// empty: what a CUDA step reads of them, in a quarter of their bytes (distributed/rank_sequences.hpp).
struct Bf16Features {
  Tensor<Bf16Bits> target_features;
  Tensor<Bf16Bits> teacher_hidden;
};

// Sequence b's anchor slots: the explicit ones, or SPEC §4's sample for global sequence
// sequence_offset + b in optimizer step `step`.
template <class Real>
AnchorSlots batch_anchor_slots(const DrafterConfig& config, const DrafterBatch<Real>& batch, std::int64_t b,
                               std::uint32_t step, std::uint32_t sequence_offset) {
  if (batch.anchors) {
    const auto N = static_cast<std::size_t>(batch.anchors->dim(1));
    return AnchorSlots{std::vector<std::int64_t>(batch.anchors->row(b), batch.anchors->row(b) + N),
                       std::vector<std::uint8_t>(batch.keep->row(b), batch.keep->row(b) + N)};
  }
  return sample_anchors(batch.sequence_loss_mask(b), config.max_anchors, config.seed, step,
                        sequence_offset + static_cast<std::uint32_t>(b));
}

// The parts of validate_drafter_batch (below), in its order, for a batch whose F and G are held
// elsewhere until its turn (RankSequences, distributed/rank_sequences.hpp): the tokens (shape, ids,
// the global index range) and loss mask; F's and G's shapes and F's finiteness; the anchors.
inline void validate_batch_tokens(const DrafterConfig& config, const Tensor<std::int64_t>& x,
                                  const Tensor<std::uint8_t>& loss_mask, std::uint32_t sequence_offset) {
  if (x.rank() != 2 || x.dim(0) < 1 || x.dim(1) < 1) {
    throw_input_error("tokens", str("shape ", shape_string(x.shape()), " is not [nseq, S] with nseq >= 1 and S >= 1"));
  }
  const std::int64_t nseq = x.dim(0), S = x.dim(1);
  if (std::uint64_t(sequence_offset) + std::uint64_t(nseq) > kMaxSequenceIndex) {
    throw_input_error("sequence_offset", str(sequence_offset, " + nseq = ", nseq,
                                             " exceeds 2^20 global sequences (SPEC §6 stream layout)"));
  }
  for (std::int64_t b = 0; b < nseq; ++b) {
    for (std::int64_t p = 0; p < S; ++p) {
      const std::int64_t t = x.row(b)[p];
      if (t < 0 || t >= config.vocab_size) {
        throw_input_error(str("tokens[", b, "][", p, "]"),
                          str(t, " is outside [0, vocab_size = ", config.vocab_size, ")"));
      }
    }
  }
  if (loss_mask.shape() != Shape{nseq, S}) {
    throw_input_error("loss_mask",
                      str("shape ", shape_string(loss_mask.shape()), " is not [nseq, S] = ", shape_string({nseq, S})));
  }
  for (std::int64_t e = 0; e < loss_mask.numel(); ++e) {
    if (loss_mask[e] > 1) {
      throw_input_error(str("loss_mask[", e / S, "][", e % S, "]"), str(int(loss_mask[e]), " is not 0 or 1"));
    }
  }
}

// F [nseq, S, K H] with every value finite, G [nseq, S, H]: the shapes of `x`'s batch. F may hold
// bf16 bits: first_non_finite(F) is the index of its first non-finite element or -1, and value_of
// turns an element into the number it stands for.
template <class FeatureTensor, class FirstNonFinite, class ValueOf>
void validate_batch_features(const DrafterConfig& config, const Tensor<std::int64_t>& x, const FeatureTensor& F,
                             const Shape& teacher_shape, FirstNonFinite first_non_finite, ValueOf value_of) {
  const std::int64_t nseq = x.dim(0), S = x.dim(1), H = config.hidden_size, K = config.num_feature_layers();
  if (F.rank() != 3 || F.dim(0) != nseq || F.dim(1) != S) {
    throw_input_error("target_features", str("shape ", shape_string(F.shape()),
                                             " is not [nseq, S, K H] = ", shape_string({nseq, S, K * H})));
  }
  if (F.dim(2) != K * H) {
    throw_input_error("target_features", str("width ", F.dim(2), " is not K H = ", K, " x ", H, " = ", K * H,
                                             " (K = len(target_layer_ids))"));
  }
  if (const std::int64_t e = first_non_finite(F); e >= 0) {
    throw_input_error(str("target_features[", e / (S * K * H), "][", (e / (K * H)) % S, "]"),
                      str("element ", e % (K * H), " is ", value_of(F[e]), "; every value must be finite"));
  }
  if (teacher_shape != Shape{nseq, S, H}) {
    throw_input_error("teacher_hidden", str("shape ", shape_string(teacher_shape),
                                            " is not [nseq, S, H] = ", shape_string({nseq, S, H})));
  }
}

template <class Real>
void validate_batch_anchors(const DrafterBatch<Real>& batch) {
  const std::int64_t nseq = batch.num_sequences(), S = batch.context_length();
  if (batch.anchors.has_value() != batch.keep.has_value()) {
    throw_input_error(batch.anchors ? "keep" : "anchors", "explicit anchors need both anchors and keep");
  }
  if (batch.anchors) {
    const Tensor<std::int64_t>& a = *batch.anchors;
    if (a.rank() != 2 || a.dim(0) != nseq || a.dim(1) < 1) {
      throw_input_error("anchors", str("shape ", shape_string(a.shape()), " is not [nseq = ", nseq, ", N >= 1]"));
    }
    if (batch.keep->shape() != a.shape()) {
      throw_input_error("keep", str("shape ", shape_string(batch.keep->shape()), " does not match anchors ",
                                    shape_string(a.shape())));
    }
    const auto N = static_cast<std::size_t>(a.dim(1));
    for (std::int64_t b = 0; b < nseq; ++b) {
      validate_anchor_slots({a.row(b), N}, {batch.keep->row(b), N}, S, str("anchors of sequence ", b));
    }
  }
}

// Shapes, token ids, mask values, anchors and finiteness; each message names the tensor and the
// offending element. `sequence_offset` is the global index of sequence 0 (SPEC §6: < 2^20).
template <class Real>
void validate_drafter_batch(const DrafterConfig& config, const DrafterBatch<Real>& batch,
                            std::uint32_t sequence_offset) {
  validate_batch_tokens(config, batch.tokens, batch.loss_mask, sequence_offset);
  validate_batch_features(
      config, batch.tokens, batch.target_features, batch.teacher_hidden.shape(),
      [](const Tensor<Real>& F) {
        for (std::int64_t e = 0; e < F.numel(); ++e) {
          if (!is_finite_value(F[e])) return e;
        }
        return std::int64_t(-1);
      },
      [](const Real& v) -> const Real& { return v; });
  validate_batch_anchors(batch);
}

}  // namespace dflash
