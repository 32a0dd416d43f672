// A rank's share of a step's global batch as the step takes it. A CUDA step reads a sequence's F and
// G only as bf16 (its uploads round them), so `dflash train` hands it each sequence with F and G
// already rounded to bf16 as it is read (Bf16Features): the rank holds its step's sequences in a
// quarter of their bytes in double (4.0 GB instead of 16.1 GB at 8 sequences of 8192 rows at full
// scale), and the step uploads those bits as they are. The reference step computes in double: it
// widens each sequence's bf16 values back, exactly, only at the sequence's turn (SequenceAtTurn).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "reference/drafter.hpp"

namespace dflash {

// Sequences first_global_index + b (b < batch->num_sequences()) of the step's global batch, in one
// DrafterBatch (they share S; a sequence of its own S is a batch of one). Anchors are sampled in the
// step (the batch must not hold explicit ones) and S must not exceed max_context. With
// bf16_features, the batch's own F and G are empty and those are the sequences' features.
struct RankSequences {
  std::int64_t first_global_index = 0;
  const DrafterBatch<double>* batch = nullptr;
  const Bf16Features* bf16_features = nullptr;

  std::int64_t num_sequences() const { return batch->num_sequences(); }
};

// s's batch validated as validate_drafter_batch does (its F and G being s.bf16_features when given,
// whose shapes must be the batch's), with the global index of its sequence 0 from `options`.
void validate_rank_sequences(const DrafterConfig& config, const RankSequences& s, const DrafterStepOptions& options);

// W of s (drafter_weight_sum), after validate_rank_sequences.
double rank_sequences_weight_sum(const DrafterConfig& config, const RankSequences& s,
                                 const DrafterStepOptions& options);

// The teacher rows the labels of `seqs` (s's sequences, prepared) reach must be finite
// (drafter_detail::validate_teacher_rows), in s's G: the batch's or the bf16 one.
void validate_rank_teacher_rows(const RankSequences& s, const std::vector<PreparedSequence<double>>& seqs);

// s's batch for the reference's forward: *s.batch itself, or (bf16_features) a copy of it whose F
// and G are the bf16 values widened to double, which lives as long as this object.
class SequenceAtTurn {
 public:
  SequenceAtTurn(MemoryTracker& tracker, const RankSequences& s);
  SequenceAtTurn(const SequenceAtTurn&) = delete;
  SequenceAtTurn& operator=(const SequenceAtTurn&) = delete;
  const DrafterBatch<double>& batch() const { return widened_ ? *widened_ : *s_.batch; }

 private:
  const RankSequences& s_;
  std::optional<DrafterBatch<double>> widened_;
};

}  // namespace dflash
