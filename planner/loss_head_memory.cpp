#include "planner/loss_head_memory.hpp"

#include <algorithm>

#include "io/errors.hpp"
#include "planner/checked_bytes.hpp"

namespace dflash {
namespace {

std::int64_t chunk_rows_used(const LossHeadShape& s) { return std::min(s.chunk_rows, s.rows); }

}  // namespace

void validate_loss_head_shape(const LossHeadShape& s) {
  require_at_least(s.rows, 1, "tokens");
  require_at_least(s.hidden, 1, "hidden_size");
  require_at_least(s.vocab, 1, "vocab_size");
  require_at_least(s.chunk_rows, 1, "loss_chunk_rows");
  require_at_least(s.element_bytes, 1, "activation element bytes");
  require_at_least(s.statistic_bytes, 1, "statistic element bytes");
  require_at_least(s.gradient_bytes, 0, "gradient element bytes");
}

LossHeadHeadline loss_head_headline(const LossHeadShape& s) {
  validate_loss_head_shape(s);
  LossHeadHeadline h;
  h.full_logits_bytes = checked_product({s.rows, s.vocab, s.element_bytes});
  h.chunk_logits_bytes = checked_product({chunk_rows_used(s), s.vocab, s.element_bytes});
  const std::int64_t logits_and_log_probs = checked_product({2, h.full_logits_bytes});
  h.saved_input_bytes = checked_product({s.rows, s.hidden, s.element_bytes});
  h.saved_bytes[static_cast<std::size_t>(LossPolicy::materialize)] = logits_and_log_probs;
  h.saved_bytes[static_cast<std::size_t>(LossPolicy::chunk_retain)] = logits_and_log_probs;
  h.saved_bytes[static_cast<std::size_t>(LossPolicy::chunk_recompute)] = h.saved_input_bytes;
  h.saved_bytes[static_cast<std::size_t>(LossPolicy::chunk_grad_in_forward)] =
      checked_product({s.rows, s.hidden, s.gradient_element_bytes()});  // dL/dY
  return h;
}

CategoryBytes loss_head_memory(const LossHeadShape& s, LossPolicy policy) {
  const LossHeadHeadline h = loss_head_headline(s);
  const std::int64_t rows_bytes = h.saved_input_bytes;                        // Y's rows
  const std::int64_t row_grads = h.saved(LossPolicy::chunk_grad_in_forward);  // dL/dY
  const std::int64_t row_stats = checked_product({3, s.rows, s.statistic_bytes});
  const std::int64_t chunk_pair = checked_product({2, h.chunk_logits_bytes});
  CategoryBytes m;
  switch (policy) {
    case LossPolicy::materialize:
    case LossPolicy::chunk_retain:
      m[PlanCategory::loss_saved] =
          checked_sum(checked_sum(h.saved(policy), row_stats), s.lm_head_grad ? rows_bytes : 0);
      break;
    case LossPolicy::chunk_recompute:
      m[PlanCategory::loss_saved] = checked_sum(rows_bytes, row_stats);
      m[PlanCategory::transient] = chunk_pair;
      break;
    case LossPolicy::chunk_grad_in_forward:
      m[PlanCategory::loss_saved] = row_grads;
      m[PlanCategory::transient] = checked_sum(chunk_pair, row_stats);
      break;
  }
  m[PlanCategory::gradients] =
      checked_sum(row_grads, s.lm_head_grad ? checked_product({s.vocab, s.hidden, s.gradient_element_bytes()}) : 0);
  m[PlanCategory::outputs] = checked_product({2, s.rows, s.statistic_bytes});
  return m;
}

CategoryBytes cuda_loss_head_memory(const LossHeadShape& s, LossPolicy policy) {
  if (policy == LossPolicy::chunk_retain) {
    throw_input_error("loss_policy", "'chunk_retain' is not offered by the CUDA loss head");
  }
  if (s.lm_head_grad) {
    throw_input_error("lm_head_grad", "true is not offered by the CUDA loss head (lm_head is frozen)");
  }
  CategoryBytes m = loss_head_memory(s, policy);
  constexpr std::int64_t kRowIndexBytes = 4;  // int32
  const std::int64_t list = checked_product({s.rows, kRowIndexBytes});
  const std::int64_t chunk = policy == LossPolicy::materialize ? s.rows : chunk_rows_used(s);
  const std::int64_t row_bytes = std::max(2 * s.element_bytes, s.gradient_element_bytes());
  const std::int64_t rows_buffer = checked_product({chunk, s.hidden, row_bytes});
  const std::int64_t scratch = checked_product({s.rows, checked_sum(checked_product({2, s.statistic_bytes}), 1)});
  PlanCategory list_category =
      policy == LossPolicy::chunk_grad_in_forward ? PlanCategory::transient : PlanCategory::loss_saved;
  m[list_category] = checked_sum(m[list_category], list);
  m[PlanCategory::transient] = checked_sum(m[PlanCategory::transient], checked_sum(rows_buffer, scratch));
  return m;
}

}  // namespace dflash
