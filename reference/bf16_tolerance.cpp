#include "reference/bf16_tolerance.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <span>

#include "reference/compare.hpp"
#include "reference/hybrid_loss.hpp"

namespace dflash {
namespace {

double tensor_error(const Tensor<double>& a, const Tensor<double>& ref) {
  if (a.shape() != ref.shape()) return std::numeric_limits<double>::infinity();
  return relative_error(std::span(a.data(), a.values().size()), std::span(ref.data(), ref.values().size()));
}

double count_error(std::int64_t a, std::int64_t ref) { return std::abs(static_cast<double>(a - ref)); }

// The maths depends on h, s and tau only; the policy and chunking are the production run's.
LossHeadOptions plain_options(const LossHeadOptions& options) {
  LossHeadOptions o;
  o.hard_weight = options.hard_weight;
  o.soft_weight = options.soft_weight;
  o.temperature = options.temperature;
  return o;
}

}  // namespace

bool Bf16RuleReport::ok() const {
  return std::all_of(entries.begin(), entries.end(), [](const ToleranceEntry& e) { return e.ok(); });
}

double Bf16RuleReport::worst_ratio() const {
  double worst = 0;
  for (const ToleranceEntry& e : entries) {
    if (e.error == 0) continue;
    worst = std::max(worst, e.bound() == 0 ? std::numeric_limits<double>::infinity() : e.error / e.bound());
  }
  return worst;
}

std::string Bf16RuleReport::describe() const {
  std::string out;
  char line[256];
  for (const ToleranceEntry& e : entries) {
    std::snprintf(line, sizeof line, "%s: error %.3e <= %g x %.3e + %.1e = %.3e %s\n", e.quantity.c_str(), e.error,
                  kPlainErrorFactor, e.plain_error, e.floor, e.bound(), e.ok() ? "ok" : "FAILS");
    out += line;
  }
  return out;
}

Bf16RuleReport check_bf16_rule(const LossHeadResult<double>& production, const Bf16Emulation& plain,
                               const LossHeadResult<double>& reference) {
  const LossHeadStats<double>& ref = reference.stats;
  const LossHeadStats<double>& emu = plain.result.stats;
  const LossHeadStats<double>& got = production.stats;
  auto scalar = [&](const char* name, double a, double e, double r) {
    return ToleranceEntry{name, scalar_relative_error(a, r, ref.magnitude), scalar_relative_error(e, r, ref.magnitude),
                          kFp32Floor};
  };
  auto tensor = [&](const char* name, const Tensor<double>& a, const Tensor<double>& e, const Tensor<double>& r) {
    return ToleranceEntry{name, tensor_error(a, r), tensor_error(e, r), kFp32Floor};
  };
  Bf16RuleReport report;
  report.entries = {
      scalar("loss", got.loss, emu.loss, ref.loss),
      scalar("ce", got.ce, emu.ce, ref.ce),
      scalar("kl", got.kl, emu.kl, ref.kl),
      tensor("lse", production.lse, plain.result.lse, reference.lse),
      tensor("token_loss", production.token_loss, plain.result.token_loss, reference.token_loss),
      tensor("hidden_grad", production.hidden_grad, plain.result.hidden_grad, reference.hidden_grad),
      ToleranceEntry{"correct", count_error(got.correct, ref.correct), count_error(emu.correct, ref.correct),
                     static_cast<double>(plain.ambiguous_argmax_rows)},
      ToleranceEntry{"valid_rows", count_error(got.valid_rows, ref.valid_rows), 0, 0},
  };
  return report;
}

Bf16RuleOracle::Bf16RuleOracle(const LossHeadProblem<double>& problem, const LossHeadOptions& options)
    : problem_(round_to_device_formats(tracker_, problem)),
      reference_(hybrid_loss_unchunked(tracker_, plain_options(options), problem_.hidden, problem_.targets(),
                                       problem_.weight_sum)),
      plain_(hybrid_loss_bf16_emulation(tracker_, plain_options(options), problem_)) {}

}  // namespace dflash
