#include "golden/compare_rules.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "golden/bf16_rule.hpp"
#include "golden/check.hpp"
#include "reference/bf16_tolerance.hpp"
#include "reference/loss_head.hpp"

namespace dflash {

namespace {

using safetensors::Dtype;

// Significand bits of each result dtype: the order "finer than".
int significand_bits(Dtype dtype) {
  switch (dtype) {
    case Dtype::F64:
      return 53;
    case Dtype::F32:
      return 24;
    case Dtype::BF16:
      return 8;
    default:
      return 0;
  }
}

LossHeadResult<double> widened(MemoryTracker& tracker, const LossHeadForward<float>& f) {
  auto widen = [&](const Tensor<float>& t) {
    Tensor<double> out(tracker, MemoryCategory::outputs, t.shape());
    for (std::int64_t i = 0; i < t.numel(); ++i) out[i] = t[i];
    return out;
  };
  LossHeadResult<double> r{
      {}, widen(f.lse), widen(f.token_loss), Tensor<double>(tracker, MemoryCategory::gradients, {0}), std::nullopt};
  r.stats.loss = f.stats.loss;
  r.stats.ce = f.stats.ce;
  r.stats.kl = f.stats.kl;
  r.stats.correct = f.stats.correct;
  r.stats.valid_rows = f.stats.valid_rows;
  return r;
}

// The fp32 counterpart of bf16_rule_golden_tolerances (golden/bf16_rule.hpp): the plain fp32
// computation is the reference loss head in float on the golden's own inputs rounded to float (Y,
// teacher rows, W_lm, weights; W re-summed in float), with the golden's policy and chunk rows.
// Each tensor's bound is kPlainErrorFactor (2) x its error + kFp32Floor, on the golden check's
// measure. Accuracy is on that measure too: a relative error of the golden's accuracy, so the plain computation's
// changed rows, twice, are allowed; a row whose argmax fp32 flips is a near-tie within ~1e-6 of
// the top logit, which the plain computation meets where the data have one.
std::map<std::string, double, std::less<>> fp32_loss_head_bounds(const Golden& golden) {
  MemoryTracker tracker;
  const GoldenLossHeadProblems problems = golden_loss_head_problems(tracker, golden);
  std::vector<LossHeadProblem<float>> plain_problems;
  float weight_sum = 0;
  for (const LossHeadProblem<double>& p : problems.exact) {
    plain_problems.push_back(convert_problem<float>(tracker, p));
    weight_sum = sum_weights(std::span<const float>(plain_problems.back().weights)) + weight_sum;
  }
  std::vector<LossHeadResult<double>> plain;
  for (LossHeadProblem<float>& p : plain_problems) {
    const LossHeadForward<float> f = loss_head_forward(tracker, problems.options, p.hidden, p.targets(), weight_sum);
    plain.push_back(widened(tracker, f));
  }
  GoldenOutputs measured{loss_head_golden_results(plain, weight_sum), {}};
  for (const auto& [name, t] : measured.tensors) measured.tolerance[name] = std::numeric_limits<double>::infinity();
  std::map<std::string, double, std::less<>> bounds;
  for (const GoldenCheckRow& row : compare_golden_outputs(golden, measured))
    bounds[row.tensor] = kPlainErrorFactor * row.error + kFp32Floor;
  return bounds;
}

std::map<std::string, double, std::less<>> bf16_loss_head_bounds(const Golden& golden) {
  MemoryTracker tracker;
  return bf16_rule_golden_tolerances(tracker, golden, golden_loss_head_problems(tracker, golden));
}

}  // namespace

std::string_view compare_rule_name(CompareRule rule) {
  switch (rule) {
    case CompareRule::exact:
      return "exact";
    case CompareRule::fp32:
      return "fp32";
    case CompareRule::bf16:
      return "bf16";
  }
  return "?";
}

std::optional<CompareRule> compare_rule_from_name(std::string_view name) {
  for (CompareRule r : {CompareRule::exact, CompareRule::fp32, CompareRule::bf16}) {
    if (compare_rule_name(r) == name) return r;
  }
  return std::nullopt;
}

Dtype finest_storage_needed(CompareRule rule) {
  switch (rule) {
    case CompareRule::exact:
      return Dtype::F64;
    case CompareRule::fp32:
      return Dtype::F32;
    case CompareRule::bf16:
      return Dtype::BF16;
  }
  return Dtype::F64;
}

bool is_result_dtype(Dtype stored) { return significand_bits(stored) > 0; }

bool storage_is_fine_enough(Dtype stored, CompareRule rule) {
  return significand_bits(stored) >= significand_bits(finest_storage_needed(rule));
}

StepRoundings step_roundings(const DrafterConfig& config) {
  const double L = double(config.num_hidden_layers);
  return {24 * L + 8, 12 * L + 4};
}

double step_longest_reduction(const DrafterConfig& c, std::int64_t nseq, std::int64_t S, std::int64_t T) {
  return double(std::max({c.hidden_size, c.intermediate_size, c.num_attention_heads * c.head_dim, c.feature_width(),
                          S + T, c.vocab_size, nseq * T, nseq * S}));
}

double step_result_bound(CompareRule rule, const DrafterConfig& config, std::int64_t nseq, std::int64_t S,
                         std::int64_t T) {
  if (rule == CompareRule::exact) return kReferenceTolerance;
  const double u_storage = rule == CompareRule::bf16 ? kBf16UnitRoundoff : kFp32UnitRoundoff;
  const StepRoundings k = step_roundings(config);
  const double n = step_longest_reduction(config, nseq, S, T);
  return 2 * std::sqrt(k.stored * u_storage * u_storage + k.reductions * n * kFp32UnitRoundoff * kFp32UnitRoundoff);
}

bool is_loss_head_result(std::string_view tensor) {
  return tensor == "output/loss" || tensor == "output/ce" || tensor == "output/kl" || tensor == "output/lse" ||
         tensor == "output/token_loss" || tensor == "output/accuracy" || tensor == "output/weight_sum";
}

double storage_unit_roundoff(Dtype stored) { return std::ldexp(1.0, -significand_bits(stored)); }

double stored_result_bound(std::string_view tensor, double computation_bound, Dtype stored) {
  return is_loss_head_result(tensor) ? computation_bound + storage_unit_roundoff(stored) : computation_bound;
}

std::map<std::string, double, std::less<>> golden_result_bounds(const Golden& golden, CompareRule rule) {
  std::map<std::string, double, std::less<>> loss_head;
  if (rule == CompareRule::fp32) loss_head = fp32_loss_head_bounds(golden);
  if (rule == CompareRule::bf16) loss_head = bf16_loss_head_bounds(golden);
  const std::int64_t T = golden.results.at("output/hidden").shape.at(1);
  const double rest = step_result_bound(rule, golden.config, golden.num_sequences(), golden.context_length(), T);
  std::map<std::string, double, std::less<>> bounds;
  for (const auto& [name, t] : golden.results) {
    bounds[name] = rule != CompareRule::exact && is_loss_head_result(name) ? loss_head.at(name) : rest;
  }
  return bounds;
}

}  // namespace dflash
