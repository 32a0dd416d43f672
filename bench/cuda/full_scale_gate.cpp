#include "bench/cuda/full_scale_gate.hpp"

#include <algorithm>
#include <cmath>

#include "common/bf16.hpp"
#include "common/row_stats.hpp"
#include "cuda/loss_head/row_program.hpp"
#include "io/errors.hpp"
#include "reference/compare.hpp"

namespace dflash {

std::vector<std::int64_t> gate_sample_rows(std::span<const std::uint8_t> valid, std::int64_t V,
                                           std::span<const std::int64_t> chunks,
                                           std::span<const std::int64_t> call_starts) {
  std::vector<std::int64_t> listed, unlabelled;  // the valid rows in order (what the loss head lists); the others
  for (std::size_t i = 0; i < valid.size(); ++i) (valid[i] != 0 ? listed : unlabelled).push_back(std::int64_t(i));
  std::vector<std::int64_t> rows;
  if (!unlabelled.empty()) {
    rows.push_back(unlabelled.front());
    rows.push_back(unlabelled.back());
  }
  const auto n = static_cast<std::int64_t>(listed.size());
  std::vector<std::int64_t> want = {1, n - 2, n - 1};  // positions among the valid rows
  const std::int64_t overflow_row = V > 0 ? (std::int64_t(1) << 31) / V : n;
  for (std::int64_t p : {overflow_row - 1, overflow_row, overflow_row + 1}) want.push_back(p);
  for (std::int64_t c : chunks) {
    for (std::int64_t p : {c - 1, c, c + 1, n - c - 1, n - c + 1}) want.push_back(p);
  }
  for (std::int64_t s : call_starts) {
    for (std::int64_t p : {s - 1, s, s + 1}) want.push_back(p);
  }
  for (std::int64_t p : want) {
    if (p >= 0 && p < n) rows.push_back(listed[static_cast<std::size_t>(p)]);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  if (rows.size() > std::size_t(kGateMaxRows)) {
    throw_input_error("gate rows", str(rows.size(), " rows to check (", chunks.size(), " chunk sizes, ",
                                       call_starts.size(), " cuBLAS call starts): at most ", kGateMaxRows));
  }
  return rows;
}

namespace {

double bf16_of(double x) { return round_to_bf16(static_cast<float>(x)); }

struct RowOutcome {
  double lse = 0, token_loss = 0;
};

// One row's statistics in double over (z, t) and its dL/dz into dz; `plain` rounds z, t, dz to bf16.
RowOutcome row_in_double(const double* z, const double* t, std::int64_t V, std::int64_t label, double scale,
                         const HybridHyper<double>& hp, bool plain, double* dz) {
  HybridRowStats<double> stats;
  for (std::int64_t v = 0; v < V; ++v) {
    stats.update(plain ? bf16_of(z[v]) : z[v], plain ? bf16_of(t[v]) : t[v], v, label, hp.tau);
  }
  const HybridRowResult<double> row = finish_row(stats, hp.tau);
  for (std::int64_t v = 0; v < V; ++v) {
    const double zv = plain ? bf16_of(z[v]) : z[v], tv = plain ? bf16_of(t[v]) : t[v];
    const double g =
        hybrid_logit_grad(zv, teacher_log_prob(tv, row, hp.tau), v == label, row, hp.tau, hp.hard, hp.soft, scale);
    dz[v] = plain ? bf16_of(g) : g;
  }
  return {row.lse_z, hybrid_token_loss(row, hp)};
}

}  // namespace

GateRows gate_rows_from_logits(std::span<const std::int64_t> rows, std::span<const double> z, std::span<const double> t,
                               std::int64_t vocab, std::int64_t hidden, std::span<const std::int64_t> labels,
                               std::span<const float> weights, std::span<const std::uint8_t> valid, double weight_sum,
                               const HybridHyper<double>& hp) {
  const auto n = rows.size();
  const auto V = static_cast<std::size_t>(vocab);
  if (z.size() != n * V || t.size() != n * V) {
    throw_input_error("gate logits", str(z.size(), " and ", t.size(), " values for ", n, " rows of V = ", vocab));
  }
  GateRows g;
  g.vocab = vocab;
  g.hidden = hidden;
  g.rows.assign(rows.begin(), rows.end());
  g.valid.resize(n);
  g.lse.assign(n, 0.0);
  g.token_loss.assign(n, 0.0);
  g.plain_lse.assign(n, 0.0);
  g.plain_token_loss.assign(n, 0.0);
  g.dz.assign(n * V, 0.0);
  g.plain_dz.assign(n * V, 0.0);
  for (std::size_t j = 0; j < n; ++j) {
    const auto i = static_cast<std::size_t>(rows[j]);
    g.valid[j] = valid[i];
    if (valid[i] == 0) continue;
    const double scale = row_grad_scale(double(weights[i]), weight_sum);
    const RowOutcome exact = row_in_double(&z[j * V], &t[j * V], vocab, labels[i], scale, hp, false, &g.dz[j * V]);
    const RowOutcome plain = row_in_double(&z[j * V], &t[j * V], vocab, labels[i], scale, hp, true, &g.plain_dz[j * V]);
    g.lse[j] = exact.lse;
    g.token_loss[j] = exact.token_loss;
    g.plain_lse[j] = plain.lse;
    g.plain_token_loss[j] = plain.token_loss;
  }
  return g;
}

namespace {

// The valid rows' values of a per-row quantity with `width` entries per row.
template <class T>
std::vector<double> valid_entries(const GateRows& g, const std::vector<T>& values, std::size_t width) {
  std::vector<double> out;
  for (std::size_t j = 0; j < g.rows.size(); ++j) {
    if (g.valid[j] == 0) continue;
    for (std::size_t k = 0; k < width; ++k) out.push_back(static_cast<double>(values[j * width + k]));
  }
  return out;
}

ToleranceEntry rule_entry(const char* name, const std::vector<double>& got, const std::vector<double>& plain,
                          const std::vector<double>& exact, double floor) {
  return ToleranceEntry{name, relative_error(std::span<const double>(got), std::span<const double>(exact)),
                        relative_error(std::span<const double>(plain), std::span<const double>(exact)), floor};
}

}  // namespace

Bf16RuleReport check_full_scale_gate(const GateRows& e, const GateObserved& o) {
  const std::size_t n = e.rows.size(), H = static_cast<std::size_t>(e.hidden);
  if (o.lse.size() != n || o.token_loss.size() != n || o.hidden_grad.size() != n * H || e.hidden_grad.size() != n * H ||
      e.plain_hidden_grad.size() != n * H) {
    throw_input_error("gate results", str("sizes do not match ", n, " sampled rows of H = ", e.hidden));
  }
  const double floor = bf16_rule_floor(e.vocab, kRowThreads);
  Bf16RuleReport report;
  report.entries = {
      rule_entry("lse", valid_entries(e, o.lse, 1), valid_entries(e, e.plain_lse, 1), valid_entries(e, e.lse, 1),
                 floor),
      rule_entry("token_loss", valid_entries(e, o.token_loss, 1), valid_entries(e, e.plain_token_loss, 1),
                 valid_entries(e, e.token_loss, 1), floor),
      rule_entry("hidden_grad", valid_entries(e, o.hidden_grad, H), valid_entries(e, e.plain_hidden_grad, H),
                 valid_entries(e, e.hidden_grad, H), floor),
  };
  double nonzero = 0;
  for (std::size_t j = 0; j < n; ++j) {
    if (e.valid[j] != 0) continue;
    if (o.lse[j] != 0.0f || o.token_loss[j] != 0.0f) nonzero = 1;
    for (std::size_t k = 0; k < H; ++k) {
      if (o.hidden_grad[j * H + k] != 0.0f) nonzero = 1;
    }
  }
  report.entries.push_back(ToleranceEntry{"unlabelled_rows_zero", nonzero, 0, 0});
  return report;
}

}  // namespace dflash
