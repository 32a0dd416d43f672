#include "planner/training_plan.hpp"

#include <algorithm>

#include "io/errors.hpp"
#include "planner/checked_bytes.hpp"
#include "reference/drafter_dims.hpp"

namespace dflash {

PlanRequest PlanRequest::from_config(const DrafterConfig& config) {
  PlanRequest r;
  r.config = config;
  r.tokens = checked_product({config.block_size, config.max_anchors});
  r.loss_policy = config.loss_policy;
  r.loss_chunk_rows = config.loss_chunk_rows;
  r.trunk_policy = config.trunk_policy;
  r.checkpoint_every = config.checkpoint_every;
  return r;
}

void validate_plan_request(const PlanRequest& r) {
  validate_drafter_config(r.config);
  require_at_least(r.tokens, 1, "tokens");
  if (r.tokens % r.config.block_size != 0) {
    throw_input_error("tokens", str(r.tokens, " is not a multiple of block_size = ", r.config.block_size));
  }
  require_at_least(r.context, 1, "context");
  require_at_least(r.sequences, 1, "sequences");
  require_at_least(r.micro_steps, 1, "micro_steps");
  require_at_least(r.loss_chunk_rows, 1, "loss_chunk_rows");
  require_at_least(r.checkpoint_every, 1, "checkpoint_every");
  validate_training_precision(r.precision);
  validate_parallel_layout(r.layout);
  require_at_least(r.device_bytes, 1, "gpu_memory");
}

namespace {

// Token ids, loss mask, F and G of one sequence: held for every micro-step of the optimizer step
// (W is summed over all of them before any backward, TRAINING §11).
std::int64_t sequence_input_bytes(const DrafterDims& m, const TrainingPrecision& p) {
  const std::int64_t ids = checked_product({m.S, 8 + 1});
  const std::int64_t features = checked_product({m.S, m.feature_width() + m.H, p.input_bytes});
  return checked_sum(ids, features);
}

// The anchor slots and keep flags of one sequence (SPEC §4): sampled when a micro-step's drafter
// step starts and freed when it ends, so only the running micro-step's sequences hold them.
std::int64_t sequence_anchor_bytes(const DrafterDims& m) { return checked_product({m.N, 8 + 1}); }

// Anchor slots and keep flags, Y, and lse, token loss and weights of one sequence.
std::int64_t sequence_output_bytes(const DrafterDims& m, const TrainingPrecision& p) {
  return checked_sum(checked_sum(checked_product({m.N, 8 + 1}), checked_product({m.T, m.H, p.activation_bytes})),
                     checked_product({3, m.T, p.statistic_bytes}));
}

// What cuda_drafter_step (cuda/drafter/step.cpp) uploads: the context positions [S] for the
// step, and per sequence, one at a time: anchor slots and keep flags [N] (8 + 1 B), block
// positions, input tokens and labels [T] (8 B each), row weights (4 B) and valid flags (1 B) [T],
// F [S, K H] and the gathered teacher rows [T, H] at input precision. The batch stays on the host.
std::int64_t cuda_step_input_bytes(const DrafterDims& m, const TrainingPrecision& p) {
  const std::int64_t rows = checked_product({m.T, 8 + 8 + 8 + 4 + 1});
  const std::int64_t features = checked_product({m.S, m.feature_width(), p.input_bytes});
  const std::int64_t teacher = checked_product({m.T, m.H, p.input_bytes});
  return checked_sum(checked_sum(checked_product({m.S, 8}), checked_product({m.N, 8 + 1})),
                     checked_sum(rows, checked_sum(features, teacher)));
}

}  // namespace

MemoryPlan plan_training_memory(const PlanRequest& r) {
  validate_plan_request(r);
  MemoryPlan plan;
  plan.request = r;
  const DrafterDims dims = DrafterDims::of(r.config, r.context, r.tokens / r.config.block_size);
  const TrainingPrecision& p = r.precision;

  plan.parameters = drafter_parameter_counts(r.config);
  plan.loss_head_shape = {.rows = dims.T,
                          .hidden = dims.H,
                          .vocab = dims.V,
                          .chunk_rows = r.loss_chunk_rows,
                          .element_bytes = p.activation_bytes,
                          .statistic_bytes = p.statistic_bytes,
                          .lm_head_grad = r.lm_head_grad,
                          .gradient_bytes = p.gradient_bytes};
  plan.loss_head = loss_head_headline(plan.loss_head_shape);
  plan.trunk = plan_trunk(dims, r.trunk_policy, r.checkpoint_every, p);
  plan.activations = trunk_activation_summary(dims, r.checkpoint_every, p);

  CategoryBytes c = parameter_memory(plan.parameters, p, r.layout);
  // The CUDA step's loss head computes only the valid rows and has its own closed form (it also
  // refuses chunk_retain and dL/dW_lm, by name); the reference's allocates as loss_head_memory says.
  const CategoryBytes loss = p.trunk == TrunkMemoryModel::cuda
                                 ? cuda_loss_head_memory(plan.loss_head_shape, r.loss_policy)
                                 : loss_head_memory(plan.loss_head_shape, r.loss_policy);
  const std::int64_t hidden_rows = checked_product({dims.T, dims.H, p.activation_bytes});  // Y, or G's rows
  const std::int64_t n = r.sequences;
  const std::int64_t feature_grad = r.features_grad ? plan.trunk.feature_grad_bytes : 0;  // one sequence's dL/dF
  if (p.trunk == TrunkMemoryModel::cuda) {
    // cuda_drafter_step runs its sequences one after another and hands results back to the host:
    // one sequence's fp32 dL/dF (when made) and the loss head's dL/dY are alive together during
    // the trunk backward; only the loss head's rows are outputs. Its norm weights are fp32, its
    // matrices at parameter_bytes.
    const std::int64_t norms = plan.parameters.norm_weights;
    c[PlanCategory::parameters] = checked_sum(checked_product({plan.parameters.trainable - norms, p.parameter_bytes}),
                                              checked_product({norms, kCudaTrunkFp32Bytes}));
    c[PlanCategory::gradients] =
        checked_sum(checked_sum(c[PlanCategory::gradients], feature_grad), loss[PlanCategory::gradients]);
    c[PlanCategory::inputs] = cuda_step_input_bytes(dims, p);
    c[PlanCategory::outputs] = loss[PlanCategory::outputs];
  } else {
    c[PlanCategory::gradients] =
        checked_sum(checked_sum(c[PlanCategory::gradients], checked_product({n, feature_grad})),
                    std::max(loss[PlanCategory::gradients], feature_grad));
    c[PlanCategory::inputs] =
        checked_sum(checked_sum(checked_product({n, r.micro_steps, sequence_input_bytes(dims, p)}),
                                checked_product({n, sequence_anchor_bytes(dims)})),
                    hidden_rows);
    c[PlanCategory::outputs] =
        checked_sum(checked_product({n, sequence_output_bytes(dims, p)}), loss[PlanCategory::outputs]);
  }
  c[PlanCategory::saved] = plan.trunk.saved_bytes;
  c[PlanCategory::loss_saved] = loss[PlanCategory::loss_saved];
  c[PlanCategory::transient] =
      std::max(plan.trunk.transient_bytes, checked_sum(hidden_rows, loss[PlanCategory::transient]));
  plan.categories = c;
  plan.fit = device_fit(c.total(), r.device_bytes);
  return plan;
}

}  // namespace dflash
