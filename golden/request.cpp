#include "golden/request.hpp"

#include <cmath>
#include <cstdio>

#include "planner/memory_size.hpp"
#include "planner/training_plan.hpp"
#include "reference/drafter_dims.hpp"

namespace dflash {

namespace {

void require_probability_flag(const std::optional<double>& p, std::string_view flag) {
  if (p && !(std::isfinite(*p) && *p >= 0 && *p < 1)) throw_input_error(flag, str(*p, " must lie in [0, 1)"));
}

std::int64_t anchor_slots(const GoldenCase& c) { return c.config.max_anchors; }

// Bytes of a tensor's header entry, an upper estimate ({"name":{"dtype":"F64","shape":[...],
// "data_offsets":[...]}}): the file's size is the data plus these plus the metadata.
constexpr std::int64_t kHeaderBytesPerTensor = 160;
constexpr std::int64_t kHeaderBytesForMetadata = 4096;

}  // namespace

GoldenCase golden_request_case(const GoldenRequest& r) {
  if (r.case_name.empty()) throw_input_error("--case", "the case name is empty");
  if (r.sequences < 1) throw_input_error("--sequences", str(r.sequences, " must be at least 1"));
  if (r.context < 0)
    throw_input_error("--context", str(r.context, " must be at least 1 (0: block_size x max_anchors)"));
  require_probability_flag(r.attention_dropout, "--attention-dropout");
  require_probability_flag(r.hidden_dropout, "--hidden-dropout");
  GoldenCase c;
  c.name = r.case_name;
  c.summary = "user request";
  c.config = r.config;
  if (r.seed) c.config.seed = *r.seed;
  if (r.attention_dropout) c.config.attention_dropout = *r.attention_dropout;
  if (r.hidden_dropout) c.config.hidden_dropout = *r.hidden_dropout;
  validate_drafter_config(c.config, "--config");
  const std::int64_t S = r.context > 0 ? r.context : c.config.block_size * c.config.max_anchors;
  // Inputs from the seed (their own RNG stream), parameters from it too, frozen weights from
  // seed + 1 (init_frozen_weights), as the built-in cases do with theirs.
  c.batch = {.sequences = r.sequences,
             .context_length = S,
             .seed = c.config.seed,
             .mask_hole_fraction = kRequestMaskHoleFraction};
  c.parameter_seed = c.config.seed;
  c.step = r.step;
  c.weights = r.weights;
  return c;
}

double golden_step_multiply_adds(const GoldenCase& c) {
  const DrafterDims d = DrafterDims::of(c.config, c.batch.context_length, anchor_slots(c));
  const double S = double(d.S), T = double(d.T), H = double(d.H);
  const double fc = S * double(d.feature_width()) * H;
  const double projections =
      T * H * double(d.q_width() + 2 * d.kv_width()) + T * double(d.q_width()) * H + S * H * double(2 * d.kv_width());
  const double attention = 2 * T * double(d.keys()) * double(d.q_width());
  const double mlp = 3 * T * H * double(d.I);
  const double logits = 2 * T * double(d.V) * H;
  const double forward = fc + double(d.L) * (projections + attention + mlp) + logits;
  return double(c.batch.sequences) * 4 * forward;
}

GoldenCostEstimate estimate_golden_cost(const GoldenCase& c) {
  GoldenCostEstimate e;
  e.multiply_adds = golden_step_multiply_adds(c);
  e.seconds = e.multiply_adds * kReferenceSecondsPerMultiplyAdd;

  PlanRequest plan = PlanRequest::from_config(c.config);
  plan.tokens = c.config.block_size * anchor_slots(c);
  plan.context = c.batch.context_length;
  plan.sequences = c.batch.sequences;
  plan.precision = TrainingPrecision::reference();
  plan.features_grad = true;  // the golden's step hands dL/dF back
  plan.layout.gpus = 1;
  plan.layout.zero_stage = 0;
  e.step_bytes = plan_training_memory(plan).categories.total();

  const std::vector<GoldenTensorSpec> specs =
      golden_tensor_specs(c.config, c.batch.sequences, c.batch.context_length, anchor_slots(c));
  e.file_bytes = kHeaderBytesForMetadata;
  std::int64_t result_bytes = 0;
  for (const GoldenTensorSpec& s : specs) {
    std::int64_t n = 1;
    for (std::int64_t x : s.shape) n *= x;
    e.file_bytes += kHeaderBytesPerTensor + 8 * n;
    if (s.name.starts_with("output/") || s.name.starts_with("grad/")) result_bytes += 8 * n;
  }
  // The golden keeps a copy of every result, and the writer builds the whole file in memory.
  e.bytes = e.step_bytes + result_bytes + e.file_bytes;
  return e;
}

std::string describe_estimate(const GoldenCostEstimate& e) {
  char text[160];
  std::snprintf(text, sizeof text, "about %.0f s (%.2g multiply-adds) and %s GiB (file %s GiB)", std::ceil(e.seconds),
                e.multiply_adds, gib_string(e.bytes).c_str(), gib_string(e.file_bytes).c_str());
  return text;
}

std::optional<std::string> over_budget(const GoldenCostEstimate& e) {
  std::string why;
  if (e.seconds > kGenerateSecondsBudget) {
    why +=
        str("the estimated time, ", std::ceil(e.seconds), " s, is over the budget of ", kGenerateSecondsBudget, " s");
  }
  if (e.bytes > kGenerateBytesBudget) {
    why += str(why.empty() ? "" : "; ", "the estimated memory, ", gib_string(e.bytes), " GiB, is over the budget of ",
               gib_string(kGenerateBytesBudget), " GiB");
  }
  if (why.empty()) return std::nullopt;
  return why;
}

}  // namespace dflash
