// The loss head's inputs, options and results (SPEC §5), and the validation every entry point
// runs first: bad input is rejected with the argument and the offending value named.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>

#include "common/loss_head_stats.hpp"
#include "common/loss_row.hpp"
#include "io/errors.hpp"
#include "reference/loss_policy.hpp"
#include "reference/tensor.hpp"

namespace dflash {

struct LossHeadOptions {
  double hard_weight = 0.85;  // h
  double soft_weight = 0.15;  // s
  double temperature = 1.0;   // tau
  LossPolicy policy = LossPolicy::chunk_recompute;
  std::int64_t chunk_rows = 2048;  // ignored by materialize (one chunk of all rows), still validated
  bool lm_head_grad = false;       // also return dL/dW_lm (for an unfrozen head)
};

// The rows of one chunk: materialize is one chunk of all rows.
inline std::int64_t effective_chunk_rows(const LossHeadOptions& o, std::int64_t T) {
  return o.policy == LossPolicy::materialize ? (T > 1 ? T : 1) : o.chunk_rows;
}

// h, s, tau in the scalar Real (the CUDA path narrows them to float after checking the range:
// validate_cuda_loss_head).
template <class Real>
HybridHyper<Real> hybrid_hyper(const LossHeadOptions& o) {
  return HybridHyper<Real>{Real(o.hard_weight), Real(o.soft_weight), Real(o.temperature)};
}

// Everything the loss head reads besides the student hidden states Y. All of it must outlive
// backward. Rows with valid = 0 (w01 = 0) carry no label and no teacher: their label and teacher
// row are never read, and may hold anything (SPEC §4).
template <class Real>
struct LossHeadTargets {
  const Tensor<Real>* teacher_hidden = nullptr;   // [T,H], row i = G[a_n + k - 1]
  const Tensor<Real>* lm_head = nullptr;          // W_lm [V,H]
  const Tensor<Real>* teacher_lm_head = nullptr;  // the head producing the teacher's logits; null = lm_head.
                                                  // Teacher logits are constants: no gradient flows there.
  std::span<const std::int64_t> labels;           // [T], y_i
  std::span<const Real> weights;                  // [T], w_i >= 0
  std::span<const std::uint8_t> valid;            // [T], w01_i in {0,1}

  const Tensor<Real>& teacher_head() const { return teacher_lm_head ? *teacher_lm_head : *lm_head; }
};

template <class Real>
struct LossHeadResult {
  LossHeadStats<Real> stats;
  Tensor<Real> lse;                          // [T] logsumexp(z) where valid, else 0
  Tensor<Real> token_loss;                   // [T] l_i where valid, else 0
  Tensor<Real> hidden_grad;                  // dL/dY [T,H]
  std::optional<Tensor<Real>> lm_head_grad;  // dL/dW_lm [V,H] if requested
};

template <class Real>
Real sum_weights(std::span<const Real> weights) {
  Real total(0);
  for (const Real& w : weights) total += w;
  return total;
}

template <class Real>
Real abs_of(const Real& x) {
  using std::abs;
  return abs(x);
}

template <class Real>
bool is_finite_value(const Real& x) {
  using std::isfinite;
  return static_cast<bool>(isfinite(x));
}

namespace loss_head_detail {
template <class Real>
void require_finite(const Tensor<Real>& t, std::string_view name, std::span<const std::uint8_t> only_rows = {}) {
  const std::int64_t row = t.row_size();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (!only_rows.empty() && row > 0 && only_rows[static_cast<std::size_t>(i / row)] == 0) continue;
    if (!is_finite_value(t[i])) {
      throw_input_error(name, str("element ", i, (row > 0 ? str(" (row ", i / row, ")") : std::string()), " is ", t[i],
                                  "; every value must be finite"));
    }
  }
}

inline void require_shape(const Shape& got, const Shape& want, std::string_view name) {
  if (got != want) {
    throw_input_error(name, str("shape ", shape_string(got), " does not match the expected ", shape_string(want)));
  }
}
}  // namespace loss_head_detail

inline void validate_loss_head_options(const LossHeadOptions& o) {
  if (o.chunk_rows < 1) throw_input_error("loss_chunk_rows", str(o.chunk_rows, " must be at least 1"));
  if (!(std::isfinite(o.temperature) && o.temperature > 0)) {
    throw_input_error("temperature", str(o.temperature, " must be finite and > 0"));
  }
  if (!(std::isfinite(o.hard_weight) && o.hard_weight >= 0)) {
    throw_input_error("hard_weight", str(o.hard_weight, " must be finite and >= 0"));
  }
  if (!(std::isfinite(o.soft_weight) && o.soft_weight >= 0)) {
    throw_input_error("soft_weight", str(o.soft_weight, " must be finite and >= 0"));
  }
}

// Checks shapes, label range, weights, finiteness and the global weight sum W.
template <class Real>
void validate_loss_head(const LossHeadOptions& options, const Tensor<Real>& hidden, const LossHeadTargets<Real>& in,
                        const Real& weight_sum) {
  using namespace loss_head_detail;
  validate_loss_head_options(options);
  if (in.lm_head == nullptr) throw_input_error("lm_head", "missing");
  if (in.teacher_hidden == nullptr) throw_input_error("teacher_hidden", "missing");
  if (hidden.rank() != 2) throw_input_error("hidden", str("shape ", shape_string(hidden.shape()), " is not [T, H]"));
  if (in.lm_head->rank() != 2 || in.lm_head->dim(0) < 1) {
    throw_input_error("lm_head", str("shape ", shape_string(in.lm_head->shape()), " is not [V, H] with V >= 1"));
  }
  const std::int64_t T = hidden.dim(0), H = hidden.dim(1), V = in.lm_head->dim(0);
  if (H < 1) throw_input_error("hidden", str("shape ", shape_string(hidden.shape()), " has H = 0"));
  require_shape(in.lm_head->shape(), {V, H}, "lm_head");
  if (in.teacher_lm_head) require_shape(in.teacher_lm_head->shape(), {V, H}, "teacher_lm_head");
  require_shape(in.teacher_hidden->shape(), {T, H}, "teacher_hidden");
  const auto rows = static_cast<std::size_t>(T);
  if (in.labels.size() != rows) throw_input_error("labels", str("has ", in.labels.size(), " entries for T = ", T));
  if (in.weights.size() != rows) throw_input_error("weights", str("has ", in.weights.size(), " entries for T = ", T));
  if (in.valid.size() != rows) throw_input_error("valid", str("has ", in.valid.size(), " entries for T = ", T));

  bool any_weight = false;
  for (std::size_t i = 0; i < rows; ++i) {
    const Real& w = in.weights[i];
    if (!is_finite_value(w) || w < 0) throw_input_error(str("weights[", i, "]"), str(w, " must be finite and >= 0"));
    if (in.valid[i] > 1) throw_input_error(str("valid[", i, "]"), str(int(in.valid[i]), " is not 0 or 1"));
    if (in.valid[i] == 0 && w != 0) {
      throw_input_error(str("weights[", i, "]"), str(w, " is non-zero on a row with valid = 0 (w01 = 0 forces w = 0)"));
    }
    if (in.valid[i] == 1 && (in.labels[i] < 0 || in.labels[i] >= V)) {
      throw_input_error(str("labels[", i, "]"), str(in.labels[i], " is outside [0, V = ", V, ")"));
    }
    any_weight = any_weight || w > 0;
  }
  if (!is_finite_value(weight_sum) || weight_sum < 0) {
    throw_input_error("weight_sum", str(weight_sum, " must be finite and >= 0"));
  }
  if (any_weight && !(weight_sum > 0)) {
    throw_input_error("weight_sum", str(weight_sum, " is zero while some row weights are positive"));
  }
  require_finite(hidden, "hidden");
  require_finite(*in.lm_head, "lm_head");
  if (in.teacher_lm_head) require_finite(*in.teacher_lm_head, "teacher_lm_head");
  require_finite(*in.teacher_hidden, "teacher_hidden", in.valid);
}

}  // namespace dflash
