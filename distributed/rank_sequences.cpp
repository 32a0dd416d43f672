#include "distributed/rank_sequences.hpp"

#include "io/errors.hpp"

namespace dflash {
namespace {

// x [nseq, S, width] rounded; a value whose bf16 is not finite (exponent bits all ones) names itself.
Tensor<Bf16Bits> rounded(MemoryTracker& tracker, const char* name, const Tensor<double>& x) {
  Tensor<Bf16Bits> bits(tracker, MemoryCategory::inputs, x.shape());
  bf16_bits_into(x.data(), x.numel(), bits.data());
  const std::int64_t width = x.dim(2), S = x.dim(1);
  const std::int64_t e = first_non_finite_bf16(bits.data(), bits.numel());
  if (e >= 0) {
    throw_input_error(str(name, "[", e / (S * width), "][", (e / width) % S, "]"),
                      str("element ", e % width, " is ", x[e],
                          ", beyond bf16's range (its rounding is not finite); the CUDA step computes in bf16"));
  }
  return bits;
}

}  // namespace

Bf16Features round_features_to_bf16(MemoryTracker& tracker, DrafterBatch<double>& batch) {
  Bf16Features f{rounded(tracker, "target_features", batch.target_features),
                 rounded(tracker, "teacher_hidden", batch.teacher_hidden)};
  batch.target_features = Tensor<double>();
  batch.teacher_hidden = Tensor<double>();
  return f;
}

void validate_rank_sequences(const DrafterConfig& config, const RankSequences& s, const DrafterStepOptions& options) {
  validate_drafter_config(config);
  if (s.bf16_features == nullptr) return validate_drafter_batch(config, *s.batch, options.sequence_offset);
  const DrafterBatch<double>& batch = *s.batch;
  validate_batch_tokens(config, batch.tokens, batch.loss_mask, options.sequence_offset);
  validate_batch_features(
      config, batch.tokens, s.bf16_features->target_features, s.bf16_features->teacher_hidden.shape(),
      [](const Tensor<Bf16Bits>& F) { return first_non_finite_bf16(F.data(), F.numel()); },
      [](Bf16Bits b) { return double(float_from_bf16_bits(b)); });
  validate_batch_anchors(batch);
}

double rank_sequences_weight_sum(const DrafterConfig& config, const RankSequences& s,
                                 const DrafterStepOptions& options) {
  validate_rank_sequences(config, s, options);
  return drafter_detail::total_weight(prepare_sequences(config, *s.batch, options));
}

void validate_rank_teacher_rows(const RankSequences& s, const std::vector<PreparedSequence<double>>& seqs) {
  if (s.bf16_features == nullptr) return drafter_detail::validate_teacher_rows(*s.batch, seqs);
  const Tensor<Bf16Bits>& G = s.bf16_features->teacher_hidden;
  drafter_detail::validate_teacher_rows_of(G.data(), G.dim(1), G.dim(2), seqs,
                                           [](Bf16Bits b) { return double(float_from_bf16_bits(b)); });
}

SequenceAtTurn::SequenceAtTurn(MemoryTracker& tracker, const RankSequences& s) : s_(s) {
  if (s.bf16_features == nullptr) return;
  const DrafterBatch<double>& b = *s.batch;
  const Bf16Features& f = *s.bf16_features;
  const MemoryCategory in = MemoryCategory::inputs;
  widened_ = DrafterBatch<double>{b.tokens.clone(tracker, in),
                                  b.loss_mask.clone(tracker, in),
                                  Tensor<double>(tracker, in, f.target_features.shape()),
                                  Tensor<double>(tracker, in, f.teacher_hidden.shape()),
                                  std::nullopt,
                                  std::nullopt};
  if (b.anchors) {
    widened_->anchors = b.anchors->clone(tracker, in);
    widened_->keep = b.keep->clone(tracker, in);
  }
  doubles_from_bf16_bits(f.target_features.data(), f.target_features.numel(), widened_->target_features.data());
  doubles_from_bf16_bits(f.teacher_hidden.data(), f.teacher_hidden.numel(), widened_->teacher_hidden.data());
}

}  // namespace dflash
