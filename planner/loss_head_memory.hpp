// What the loss head holds, per policy (SPEC §7, §8), in two forms:
//  - the SPEC's headline numbers, which count only the big tensors (logits, log-probs, input rows,
//    dL/dY): the figures a person compares policies by;
//  - the bytes per category, which add the O(T) per-row statistics and everything else the loss
//    head allocates, exactly as reference/loss_head.hpp does (see its header comment), so that a
//    plan never lies below a measurement.
#pragma once

#include <array>
#include <cstdint>

#include "planner/plan_category.hpp"
#include "reference/loss_policy.hpp"

namespace dflash {

struct LossHeadShape {
  std::int64_t rows = 0;             // T, block tokens on this GPU
  std::int64_t hidden = 0;           // H
  std::int64_t vocab = 0;            // V
  std::int64_t chunk_rows = 0;       // c (materialize ignores it: one chunk of all rows)
  std::int64_t element_bytes = 2;    // logits, log-probs, input rows, dL/dY (bf16 in production)
  std::int64_t statistic_bytes = 4;  // per-row statistics and outputs (fp32 in production)
  bool lm_head_grad = false;         // also dL/dW_lm (an unfrozen head)
  std::int64_t gradient_bytes = 0;   // dL/dY and dL/dW_lm (fp32 in the CUDA path); 0: element_bytes

  std::int64_t gradient_element_bytes() const { return gradient_bytes > 0 ? gradient_bytes : element_bytes; }
};

// Throws InputError naming the field ("tokens", "hidden_size", "vocab_size", "loss_chunk_rows", ...).
void validate_loss_head_shape(const LossHeadShape& shape);

struct LossHeadHeadline {
  std::int64_t full_logits_bytes = 0;   // T V b: the [T,V] logits
  std::int64_t chunk_logits_bytes = 0;  // min(c,T) V b: one chunk's logits
  // What each policy keeps for backward, big tensors only: materialize and chunk_retain keep
  // logits and log-probs of every row (2 T V b); chunk_recompute the input rows (T H b);
  // chunk_grad_in_forward dL/dY (T H g, g = gradient_element_bytes()). Indexed by LossPolicy.
  std::array<std::int64_t, 4> saved_bytes{};
  std::int64_t saved_input_bytes = 0;  // T H b: the student input rows chunk_recompute keeps

  std::int64_t saved(LossPolicy p) const { return saved_bytes[static_cast<std::size_t>(p)]; }
};

LossHeadHeadline loss_head_headline(const LossHeadShape& shape);

// Peak bytes per category of one forward + backward of the loss head (b = element_bytes,
// s = statistic_bytes, g = gradient_element_bytes(), c' = min(c, T)):
//   loss_saved   materialize, chunk_retain: 2 T V b + 3 T s (+ T H b with dL/dW_lm: the input rows)
//                chunk_recompute: T H b + 3 T s;  chunk_grad_in_forward: T H g (dL/dY, built in forward)
//   transient    chunk_recompute: 2 c' V b (a chunk's z and log q, forward and again in backward)
//                chunk_grad_in_forward: 2 c' V b + 3 T s (row statistics live only during forward)
//   gradients    T H g (dL/dY handed back) + V H g with dL/dW_lm
//   outputs      2 T s (lse and token loss per row)
// The student rows Y, the teacher rows and lm_head are the caller's (inputs, frozen).
CategoryBytes loss_head_memory(const LossHeadShape& shape, LossPolicy policy);

// The same for the CUDA loss head (cuda/loss_head/head.hpp), which computes only the valid rows:
// loss_head_memory at its formats (b = 2, s = 4, g = 4 from the shape) plus, with I = 4 (an int32
// row index) and c' = min(c, T) (materialize: T),
//   the list of valid rows, T I: loss_saved under chunk_recompute and materialize (backward
//     reuses it), transient under chunk_grad_in_forward;
//   transient: one chunk's row buffer c' H max(2 b, g) (its gathered Y and G rows, then its dL/dY)
//     and forward's per-row scratch ce, kl and the correct flag, T (2 s + 1).
// None of it depends on how many rows are valid. chunk_retain is not offered on CUDA (InputError);
// nor is dL/dW_lm. Not listed: the cuBLAS workspace and a few bytes of small device records.
CategoryBytes cuda_loss_head_memory(const LossHeadShape& shape, LossPolicy policy);

}  // namespace dflash
