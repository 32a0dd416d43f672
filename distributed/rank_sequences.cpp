#include "distributed/rank_sequences.hpp"

namespace dflash {

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
