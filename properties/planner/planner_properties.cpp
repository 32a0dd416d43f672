// The plan held against what the reference allocates (issue: "measured peaks held against planned
// ones"). For random small configs and every policy combination, the reference runs and its
// MemoryTracker records the peak of every category; the plan, computed from the config alone with
// the reference's element sizes (double: 8 B everything, no optimizer), must never be below a
// measured peak, and must equal it:
//   every category, inputs included (sampled anchor slots are tracked inputs like explicit ones):
//   planned == measured peak, so the plan's total, the sum of category peaks, equals the sum of the
//   measured category peaks exactly;
//   the tracker's true peak (the largest sum at one moment) is below that sum by at most the
//   phase-bound categories (loss_saved + transient + the non-parameter gradients), which no single
//   phase holds at once: the loss head's state is freed before the trunk backward's scratch is made.
#include <algorithm>
#include <optional>
#include <sstream>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/loss_head_memory.hpp"
#include "planner/plan_vs_measured.hpp"
#include "planner/training_plan.hpp"
#include "reference/drafter.hpp"
#include "reference/drafter_problem.hpp"
#include "reference/loss_head.hpp"
#include "reference/loss_head_problem.hpp"

namespace dflash {
namespace {

// Every category planned exactly as measured, and so the plan's total the sum of the measured peaks.
void require_exact(const CategoryBytes& plan, const MemoryTracker& tracker, const std::string& context) {
  const std::vector<CategoryComparison> comparisons = compare_plan_with_tracker(plan, tracker);
  std::int64_t measured_sum = 0;
  for (const CategoryComparison& c : comparisons) {
    if (c.planned != c.measured) {
      RC_FAIL(str(context, "\n", category_name(c.category), " planned ", c.planned, " B, measured ", c.measured, " B\n",
                  comparison_report(comparisons)));
    }
    measured_sum += c.measured;
  }
  RC_ASSERT(plan.total() == measured_sum);
}

// ---- the loss head alone (run_loss_head): exact per category --------------------------------

RC_GTEST_PROP(PlanAgainstReference, LossHeadEveryPolicyExactPerCategory, ()) {
  const LossHeadProblemSpec spec{.rows = *rc::gen::inRange(1, 24),
                                 .hidden = *rc::gen::inRange(1, 7),
                                 .vocab = *rc::gen::inRange(1, 30),
                                 .seed = *rc::gen::arbitrary<std::uint32_t>()};
  const LossPolicy policy = *rc::gen::elementOf(kAllLossPolicies);
  LossHeadOptions o;
  o.policy = policy;
  o.chunk_rows = *rc::gen::inRange<std::int64_t>(1, spec.rows + 4);
  o.lm_head_grad = *rc::gen::arbitrary<bool>();
  MemoryTracker tracker;
  const LossHeadProblem<double> p = make_loss_head_problem<double>(tracker, spec);
  const LossHeadResult<double> r = run_loss_head(tracker, o, p.hidden, p.targets(), p.weight_sum);

  const LossHeadShape shape{.rows = spec.rows,
                            .hidden = spec.hidden,
                            .vocab = spec.vocab,
                            .chunk_rows = o.chunk_rows,
                            .element_bytes = 8,
                            .statistic_bytes = 8,
                            .lm_head_grad = o.lm_head_grad};
  CategoryBytes plan = loss_head_memory(shape, policy);
  plan[PlanCategory::inputs] = 2 * spec.rows * spec.hidden * 8;  // Y and the teacher rows
  plan[PlanCategory::frozen] = spec.vocab * spec.hidden * 8;     // lm_head
  const std::string context = str(loss_policy_name(policy), " T=", spec.rows, " H=", spec.hidden, " V=", spec.vocab,
                                  " c=", o.chunk_rows, " dW=", o.lm_head_grad);
  require_exact(plan, tracker, context);
  // The total: chunk_grad_in_forward builds dL/dY in forward (loss_saved) and hands it back as a
  // gradient; the plan counts it in both, and that is exactly the difference. Every other policy: none.
  const std::int64_t counted_twice = policy == LossPolicy::chunk_grad_in_forward ? spec.rows * spec.hidden * 8 : 0;
  RC_ASSERT(plan.total() - static_cast<std::int64_t>(tracker.peak_total()) == counted_twice);
}

// ---- the whole drafter step (drafter_step) ----------------------------------------------------

struct StepCase {
  DrafterConfig config;
  DrafterBatchSpec batch;
  DrafterStepOptions options;
};

void showValue(const StepCase& c, std::ostream& os) {
  os << drafter_config_to_json(c.config).dump() << " S=" << c.batch.context_length << " nseq=" << c.batch.sequences
     << " explicit=" << c.batch.explicit_anchors << " N=" << c.batch.anchor_slots
     << " trunk=" << trunk_policy_name(c.options.trunk_policy) << " k=" << c.options.checkpoint_every
     << " loss=" << loss_policy_name(c.options.loss_policy) << " chunk=" << c.options.loss_chunk_rows;
}

rc::Gen<StepCase> gen_step_case() {
  return rc::gen::exec([] {
    StepCase s;
    DrafterConfig& c = s.config;
    c.num_key_value_heads = *rc::gen::inRange(1, 3);
    c.num_attention_heads = c.num_key_value_heads * *rc::gen::inRange(1, 3);
    c.head_dim = 2 * *rc::gen::inRange(1, 3);
    c.hidden_size = *rc::gen::inRange(1, 9);
    c.intermediate_size = *rc::gen::inRange(1, 13);
    c.num_hidden_layers = *rc::gen::inRange(1, 5);
    c.vocab_size = *rc::gen::inRange(2, 24);
    c.block_size = *rc::gen::inRange(2, 5);
    c.mask_token_id = c.vocab_size - 1;
    c.target_layer_ids.resize(static_cast<std::size_t>(*rc::gen::inRange(1, 3)));
    for (std::size_t i = 0; i < c.target_layer_ids.size(); ++i) c.target_layer_ids[i] = std::int64_t(3 * i + 1);
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
      c.layer_types.push_back(*rc::gen::element(LayerType::full_attention, LayerType::sliding_attention));
    }
    c.sliding_window = *rc::gen::inRange(1, 9);
    c.max_anchors = *rc::gen::inRange(1, 5);
    c.attention_dropout = *rc::gen::element(0.0, 0.2);
    c.hidden_dropout = *rc::gen::element(0.0, 0.2);
    c.seed = *rc::gen::arbitrary<std::uint32_t>();
    s.batch.sequences = *rc::gen::inRange(1, 3);
    s.batch.context_length = *rc::gen::inRange(1, 14);
    s.batch.seed = *rc::gen::arbitrary<std::uint32_t>();
    s.batch.explicit_anchors = *rc::gen::arbitrary<bool>();
    s.batch.anchor_slots = s.batch.explicit_anchors ? *rc::gen::inRange(1, 5) : 0;
    s.batch.invalid_block_fraction = *rc::gen::element(0.0, 0.3);
    const std::int64_t N = s.batch.explicit_anchors ? s.batch.anchor_slots : c.max_anchors;
    const std::int64_t T = N * c.block_size;
    s.options.checkpoint_every = *rc::gen::inRange(1, 5);
    s.options.loss_chunk_rows = *rc::gen::inRange<std::int64_t>(1, T + 4);
    return s;
  });
}

// One config and batch, every loss policy x trunk policy: the step, measured, against its plan.
RC_GTEST_PROP(PlanAgainstReference, DrafterStepEveryPolicyCombination, ()) {
  StepCase s = *gen_step_case();
  const DrafterConfig& c = s.config;
  validate_drafter_config(c);
  for (LossPolicy loss : kAllLossPolicies) {
    for (TrunkPolicy trunk : kAllTrunkPolicies) {
      s.options.loss_policy = loss;
      s.options.trunk_policy = trunk;
      MemoryTracker tracker;
      const DrafterParameters<double> params = init_drafter_parameters<double>(tracker, c, c.seed, 0.1);
      const FrozenWeights<double> frozen = init_frozen_weights<double>(tracker, c, c.seed);
      const DrafterBatch<double> batch = make_drafter_batch<double>(tracker, c, s.batch);
      const DrafterStepResult<double> r = drafter_step(tracker, c, params, frozen, batch, s.options);

      PlanRequest q = PlanRequest::from_config(c);
      q.tokens = batch.anchor_slots(c) * c.block_size;
      q.context = s.batch.context_length;
      q.sequences = s.batch.sequences;
      q.loss_policy = loss;
      q.loss_chunk_rows = s.options.loss_chunk_rows;
      q.trunk_policy = trunk;
      q.checkpoint_every = s.options.checkpoint_every;
      q.precision = TrainingPrecision::reference();
      q.features_grad = true;  // drafter_step hands dL/dF back
      q.layout = {.gpus = 1, .zero_stage = 0};
      const MemoryPlan plan = plan_training_memory(q);

      std::ostringstream context;
      showValue(s, context);
      require_exact(plan.categories, tracker, context.str());
      const CategoryBytes& k = plan.categories;
      const std::int64_t phase_bound = k[PlanCategory::loss_saved] + k[PlanCategory::transient] +
                                       k[PlanCategory::gradients] - plan.parameters.trainable * 8;
      const auto measured_total = static_cast<std::int64_t>(tracker.peak_total());
      RC_ASSERT(k.total() >= measured_total);
      RC_ASSERT(k.total() - measured_total <= phase_bound);
    }
  }
}

}  // namespace
}  // namespace dflash
