#include "planner/trunk_plan.hpp"

#include <algorithm>
#include <initializer_list>

#include "io/errors.hpp"
#include "planner/checked_bytes.hpp"

namespace dflash {
namespace {

bool is_statistic(const SavedTensor& t) {
  const std::string_view n = t.name;
  return n.ends_with("rstd") || n.ends_with("lse");
}

std::int64_t statistic_elements(const std::vector<SavedTensor>& tensors) {
  std::int64_t n = 0;
  for (const SavedTensor& t : tensors) n = checked_sum(n, is_statistic(t) ? t.elements() : 0);
  return n;
}

std::int64_t elements(const std::vector<SavedTensor>& tensors) {
  std::int64_t n = 0;
  for (const SavedTensor& t : tensors) n = checked_sum(n, t.elements());
  return n;
}

std::int64_t saved_peak_bytes(const TrunkSavedPlan& plan, const TrainingPrecision& p) {
  const std::int64_t wider = std::max<std::int64_t>(0, p.statistic_bytes - p.activation_bytes);
  const std::int64_t statistics = checked_sum(statistic_elements(plan.kept), statistic_elements(plan.largest_live));
  return checked_sum(checked_product({plan.peak_elements, p.activation_bytes}), checked_product({wider, statistics}));
}

std::int64_t sum(std::initializer_list<std::int64_t> terms) {
  std::int64_t s = 0;
  for (std::int64_t t : terms) s = checked_sum(s, t);
  return s;
}

// The trunk's scratch, in elements, phase by phase as drafter_trunk.hpp and drafter_layer.hpp
// allocate it (X = [T,H], Q = [T,nh d], KVt = [T,nkv d], KVs = [S,nkv d], keys = S + T, R = both
// RoPE tables, (T + S) d, A = one layer's activations; the reference on one thread: on N it keeps
// one score row, and three key rows, per attention part, min(N, nh) forward and min(N, nkv) backward):
//   layer forward        [input X unless a kept boundary] + [A unless `none` keeps it] + R
//                        + max(score row keys, o_proj output X, MLP output + layer output 2X)
//   end of forward       the final norm's input and output, 2X
//   segment recompute    dL/dX + dL/dC [S,H] + R + max(keys, 2X)        (activations are saved)
//   layer backward       dL/dC + max(MLP: dL/dX'' + dv + d_mlp X's and d_act, d_gate, d_up [T,I]: 3X + 3 [T,I],
//                                    attention: dL/dX', dq, dKc, dVc, dKb, dVb, d_o_proj, d_attn_out, 3 key rows,
//                                    projections: dL/dX', dq, dKc, dVc, dKb, dVb, R, dq_proj, dKc_proj, dKb_proj, du)
//   context backward     dL/dC + dL/d(F W_fc^T), 2 [S,H]
std::int64_t trunk_transient_elements(const DrafterDims& m, TrunkPolicy policy, std::int64_t segment,
                                      std::int64_t layer_activations) {
  const std::int64_t X = checked_product({m.T, m.H}), TI = checked_product({m.T, m.I});
  const std::int64_t Q = checked_product({m.T, m.q_width()});
  const std::int64_t KVt = checked_product({m.T, m.kv_width()}), KVs = checked_product({m.S, m.kv_width()});
  const std::int64_t C = checked_product({m.S, m.H}), keys = m.keys();
  const std::int64_t R = checked_product({m.T + m.S, 2 * (m.d / 2)});
  const std::int64_t layer_scratch = std::max(keys, 2 * X);

  std::int64_t peak = 2 * X;  // end of forward
  for (std::int64_t l = 0; l < m.L; ++l) {
    const bool boundary = policy == TrunkPolicy::none || l % segment == 0;
    peak =
        std::max(peak, sum({boundary ? 0 : X, policy == TrunkPolicy::none ? 0 : layer_activations, R, layer_scratch}));
  }
  if (policy != TrunkPolicy::none) peak = std::max(peak, sum({X, C, R, layer_scratch}));
  const std::int64_t mlp = sum({3 * X, 3 * TI});
  const std::int64_t attention = sum({X, Q, 2 * KVs, 2 * KVt, X, Q, 3 * keys});
  const std::int64_t projections = sum({X, Q, 2 * KVs, 2 * KVt, R, Q, KVs, KVt, X});
  peak = std::max(peak, sum({C, std::max({mlp, attention, projections})}));
  return std::max(peak, 2 * C);
}

void validate_dims(const DrafterDims& m) {
  require_at_least(m.S, 1, "context");
  if (m.N < 1) throw_input_error("tokens", str(m.T, " block tokens hold no block of block_size = ", m.B));
}

}  // namespace

TrunkPlan plan_trunk(const DrafterDims& m, TrunkPolicy policy, std::int64_t checkpoint_every,
                     const TrainingPrecision& precision) {
  validate_dims(m);
  validate_training_precision(precision);
  TrunkPlan plan;
  if (precision.trunk == TrunkMemoryModel::cuda) {
    const CudaTrunkMemory cuda = cuda_trunk_memory(m, policy, checkpoint_every, precision.activation_bytes);
    plan.saved_bytes = cuda.saved_bytes;
    plan.transient_bytes = cuda.transient_bytes;
    plan.feature_grad_bytes = checked_product({m.S, m.feature_width(), kCudaTrunkFp32Bytes});
    return plan;
  }
  plan.saved_tensors = trunk_saved_plan(m, policy, checkpoint_every);
  plan.saved_bytes = saved_peak_bytes(plan.saved_tensors, precision);
  const std::int64_t segment = trunk_segment_length(policy, checkpoint_every, m.L);
  const std::int64_t layer_activations = elements(layer_activation_tensors(m, 0));
  plan.transient_bytes =
      checked_product({trunk_transient_elements(m, policy, segment, layer_activations), precision.activation_bytes});
  plan.feature_grad_bytes = checked_product({m.S, m.feature_width(), precision.activation_bytes});
  return plan;
}

ActivationMemory trunk_activation_summary(const DrafterDims& m, std::int64_t checkpoint_every,
                                          const TrainingPrecision& p) {
  validate_dims(m);
  DrafterDims block_rows_only = m;
  block_rows_only.S = 0;
  ActivationMemory a;
  a.values_per_token_per_layer = elements(layer_activation_tensors(block_rows_only, 0)) / m.T;
  a.checkpoint_every = checkpoint_every;
  if (p.trunk == TrunkMemoryModel::cuda) {  // kept from forward: context, boundaries, X_L
    const CudaTrunkMemory every_k = cuda_trunk_memory(m, TrunkPolicy::every_k, checkpoint_every, p.activation_bytes);
    const std::int64_t k = std::min(checkpoint_every, m.L);
    a.all_layers_bytes = checked_product({m.L, every_k.layer_activation_bytes});
    a.residual_only_bytes = checked_product({m.L, every_k.boundary_bytes});
    a.boundary_bytes = checked_sum(checked_sum(every_k.context_bytes, every_k.final_bytes),
                                   checked_product({(m.L + k - 1) / k, every_k.boundary_bytes}));
    a.live_segment_bytes = checked_sum(checked_product({k, every_k.layer_activation_bytes}),
                                       checked_product({k - 1, every_k.boundary_bytes}));
    a.checkpointed_bytes = every_k.saved_bytes;
    return a;
  }
  a.all_layers_bytes = checked_product({m.L, elements(layer_activation_tensors(m, 0)), p.activation_bytes});
  a.residual_only_bytes = checked_product({m.L, m.T, m.H, p.activation_bytes});
  const TrunkSavedPlan every_k = trunk_saved_plan(m, TrunkPolicy::every_k, checkpoint_every);
  a.boundary_bytes = checked_product({elements(every_k.kept), p.activation_bytes});
  a.live_segment_bytes = checked_product({elements(every_k.largest_live), p.activation_bytes});
  a.checkpointed_bytes = saved_peak_bytes(every_k, p);
  return a;
}

}  // namespace dflash
