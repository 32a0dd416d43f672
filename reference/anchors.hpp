// Anchors, block tokens, labels, weights and teacher rows of one sequence (SPEC §4). Everything
// here is a function of the inputs and the RNG coordinates (seed, step, sequence): the same
// sequence in the same step always gets the same anchors.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/row_math.hpp"

namespace dflash {

// N anchor slots of one sequence: a_n and the keep flag kappa_n. Kept anchors are strictly
// increasing; a slot with kappa_n = 0 is an invalid block (no token, no label, sees nothing).
struct AnchorSlots {
  std::vector<std::int64_t> anchors;
  std::vector<std::uint8_t> keep;
};

// SPEC §4: candidates a in [0, S-2] with m[a] = m[a+1] = 1, shuffled by the Philox key
// r_a = word 0 of Philox((a, 0, stream(seq, 0xFF, 0), step)) (ties by a), the first
// min(max_anchors, #candidates) kept and sorted; the remaining slots get anchor 0, kappa 0.
// Always returns max_anchors slots.
AnchorSlots sample_anchors(std::span<const std::uint8_t> loss_mask, std::int64_t max_anchors, std::uint64_t seed,
                           std::uint32_t step, std::uint32_t seq);

// Throws InputError naming `name` (e.g. "anchors of sequence 2") and the slot: every anchor in
// [0, S), keep in {0, 1}, kept anchors strictly increasing, as many keep flags as anchors.
void validate_anchor_slots(std::span<const std::int64_t> anchors, std::span<const std::uint8_t> keep,
                           std::int64_t context_length, std::string_view name);

// Per block row i = n B + k of one sequence: what the drafter reads and what the loss head needs.
// Rows with valid = 0 (w01 = 0) carry no label and no teacher row (label and teacher_row are -1).
template <class Real>
struct SequenceBlocks {
  std::vector<std::int64_t> input_tokens;  // tok(n,k) = x[a_n] if k = 0 and kappa_n = 1, else mask_token_id
  std::vector<std::int64_t> positions;     // pos_blk(n,k) = a_n + k
  std::vector<std::int64_t> labels;        // y(n,k) = x[a_n + k]
  std::vector<Real> weights;               // w(n,k)
  std::vector<std::uint8_t> valid;         // w01(n,k)
  std::vector<std::int64_t> teacher_rows;  // a_n + k - 1: the row of G whose logits predict y(n,k)
};

// w(n,k) = kappa_n [k >= 1] [a_n + k < S] m[a_n + k] exp(-(k-1)/gamma); no gamma (the config's
// null): no decay.
template <class Real>
SequenceBlocks<Real> sequence_blocks(std::span<const std::int64_t> tokens, std::span<const std::uint8_t> loss_mask,
                                     const AnchorSlots& slots, std::int64_t block_size, std::int64_t mask_token_id,
                                     std::optional<double> decay_gamma) {
  const auto S = static_cast<std::int64_t>(tokens.size());
  const auto N = static_cast<std::int64_t>(slots.anchors.size());
  const std::int64_t B = block_size, T = N * B;
  SequenceBlocks<Real> b{std::vector<std::int64_t>(T, mask_token_id),
                         std::vector<std::int64_t>(T),
                         std::vector<std::int64_t>(T, -1),
                         std::vector<Real>(T, Real(0)),
                         std::vector<std::uint8_t>(T, 0),
                         std::vector<std::int64_t>(T, -1)};
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t a = slots.anchors[n];
    const bool kept = slots.keep[n] != 0;
    for (std::int64_t k = 0; k < B; ++k) {
      const std::int64_t i = n * B + k, p = a + k;
      b.positions[i] = p;
      if (k == 0 && kept) b.input_tokens[i] = tokens[a];
      if (!(kept && k >= 1 && p < S && loss_mask[p] != 0)) continue;
      b.valid[i] = 1;
      b.labels[i] = tokens[p];
      b.teacher_rows[i] = p - 1;
      b.weights[i] = decay_gamma ? exp_of(Real(Real(-(k - 1)) / Real(*decay_gamma))) : Real(1);
    }
  }
  return b;
}

}  // namespace dflash
