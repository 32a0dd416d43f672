// Properties of the reference loss head (SPEC §5, §7, §10) on random shapes: T and V not
// multiples of the chunk, chunk 1 and chunk >= T, weights with zeros, rows without labels,
// tau in [0.05, 4].
#include <cmath>
#include <functional>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "common/tolerances.hpp"
#include "reference/finite_difference.hpp"
#include "reference/loss_head.hpp"
#include "reference/loss_head_compare.hpp"
#include "reference/loss_head_mp50.hpp"
#include "reference/loss_head_problem.hpp"

namespace dflash {
namespace {

struct Case {
  LossHeadProblemSpec spec;
  LossHeadOptions options;
  std::int64_t other_chunk = 1;  // a second chunk size, to compare chunkings with each other
};

void showValue(const Case& c, std::ostream& os) {
  os << "T=" << c.spec.rows << " H=" << c.spec.hidden << " V=" << c.spec.vocab << " seed=" << c.spec.seed
     << " logit_scale=" << c.spec.logit_scale << " teacher_scale=" << c.spec.teacher_scale
     << " invalid=" << c.spec.invalid_fraction << " zero_w=" << c.spec.zero_weight_fraction
     << " zero_head=" << c.spec.zero_lm_head_fraction << " tau=" << c.options.temperature
     << " h=" << c.options.hard_weight << " s=" << c.options.soft_weight << " chunk=" << c.options.chunk_rows
     << " other_chunk=" << c.other_chunk << " dW=" << c.options.lm_head_grad;
}

// tau, h, s, chunk sizes and data fractions drawn for a problem of at most the given size.
rc::Gen<Case> gen_case(int max_rows, int max_hidden, int max_vocab) {
  return rc::gen::exec([=] {
    Case c;
    c.spec.rows = *rc::gen::inRange(1, max_rows + 1);
    c.spec.hidden = *rc::gen::inRange(1, max_hidden + 1);
    c.spec.vocab = *rc::gen::inRange(1, max_vocab + 1);
    c.spec.seed = *rc::gen::arbitrary<std::uint32_t>();
    c.spec.logit_scale = *rc::gen::element(0.5, 4.0, 12.0);
    c.spec.teacher_scale = *rc::gen::element(0.5, 1.0, 3.0);
    c.spec.invalid_fraction = *rc::gen::element(0.0, 0.3);
    c.spec.zero_weight_fraction = *rc::gen::element(0.0, 0.3);
    c.spec.zero_lm_head_fraction = *rc::gen::element(0.0, 0.3);
    c.options.temperature = *rc::gen::inRange(50, 4001) / 1000.0;
    c.options.hard_weight = *rc::gen::inRange(0, 101) / 100.0;
    c.options.soft_weight = *rc::gen::inRange(0, 101) / 100.0;
    c.options.lm_head_grad = *rc::gen::arbitrary<bool>();
    const auto T = c.spec.rows;
    auto chunk = [&] {
      return *rc::gen::oneOf(rc::gen::just(std::int64_t{1}), rc::gen::inRange<std::int64_t>(1, T + 1),
                             rc::gen::just(std::int64_t{T}), rc::gen::inRange<std::int64_t>(T + 1, T + 6));
    };
    c.options.chunk_rows = chunk();
    c.other_chunk = chunk();
    return c;
  });
}

// Results are counted by `t`, which must outlive them.
LossHeadResult<double> run(MemoryTracker& t, const LossHeadProblem<double>& p, LossHeadOptions o, LossPolicy policy,
                           std::int64_t chunk) {
  o.policy = policy;
  o.chunk_rows = chunk;
  return run_loss_head(t, o, p.hidden, p.targets(), p.weight_sum);
}

// Every policy and chunk size: within 1e-12 of the unchunked oracle (SPEC §10; the oracle's
// two-pass softmaxes and the streaming statistics round differently), and bitwise identical to
// each other (same operations in the same order within a row, rows visited in ascending order).
RC_GTEST_PROP(LossHeadProperties, EveryPolicyAndChunkSizeGivesTheOraclesResult, ()) {
  const Case c = *gen_case(20, 8, 60);
  MemoryTracker data, oracle_tracker;
  const auto p = make_loss_head_problem<double>(data, c.spec);
  const auto oracle = hybrid_loss_unchunked(oracle_tracker, c.options, p.hidden, p.targets(), p.weight_sum);
  const auto first = run(data, p, c.options, LossPolicy::chunk_recompute, c.options.chunk_rows);
  RC_ASSERT(loss_head_result_error(first, oracle) <= kReferenceTolerance);
  for (LossPolicy policy : kAllLossPolicies) {
    for (std::int64_t chunk : {c.options.chunk_rows, c.other_chunk}) {
      const auto r = run(data, p, c.options, policy, chunk);
      RC_ASSERT(loss_head_results_identical(r, first));
    }
  }
}

// Rows without a label or teacher (w01 = 0) are never read: poisoning them changes nothing.
RC_GTEST_PROP(LossHeadProperties, RowsWithoutLabelsAreNeverRead, ()) {
  Case c = *gen_case(12, 6, 30);
  c.spec.invalid_fraction = 0.4;
  MemoryTracker data;
  LossHeadProblemSpec clean = c.spec, poisoned = c.spec;
  clean.poison_invalid_rows = false;
  poisoned.poison_invalid_rows = true;
  const auto a = make_loss_head_problem<double>(data, clean);
  const auto b = make_loss_head_problem<double>(data, poisoned);
  for (LossPolicy policy : kAllLossPolicies) {
    RC_ASSERT(loss_head_results_identical(run(data, a, c.options, policy, c.options.chunk_rows),
                                          run(data, b, c.options, policy, c.options.chunk_rows)));
  }
}

// Analytic dL/dY and dL/dW_lm against 50-digit central differences: along a random direction of
// each, and along one random single coordinate of Y. In 50 digits with step 1e-20 the quotient is
// exact far beyond double precision, so the 1e-9 bound of SPEC §10 measures the double gradient's
// error, judged against sum |g_i d_i| (the scale below which a double dot product is noise) plus
// the gradients' own floor (GradientFloors: saturated probabilities are known to ~eps absolute).
RC_GTEST_PROP(LossHeadProperties, GradientsMatchFiftyDigitFiniteDifferences, ()) {
  Case c = *gen_case(5, 4, 12);
  c.options.lm_head_grad = true;
  MemoryTracker data;
  const auto p = make_loss_head_problem<double>(data, c.spec);
  const auto g = run(data, p, c.options, LossPolicy::chunk_recompute, c.options.chunk_rows);

  auto m = convert_problem<Mp50>(data, p);
  const Tensor<Mp50> teacher_head = m.lm_head.clone(MemoryCategory::frozen);  // teacher logits are constants
  LossHeadTargets<Mp50> targets = m.targets();
  targets.teacher_lm_head = &teacher_head;
  LossHeadOptions o = c.options;
  o.lm_head_grad = false;
  const std::function<Mp50()> loss = [&] {
    MemoryTracker t;
    return loss_head_forward(t, o, m.hidden, targets, m.weight_sum).stats.loss;
  };
  const Mp50 eps("1e-20");
  const double noise = 1e-25 * std::max(1.0, std::abs(static_cast<double>(loss())));  // quotient noise
  const GradientFloors floors = gradient_floors(c.options, p.hidden, p.targets(), p.weight_sum);
  auto check = [&](Tensor<Mp50>& x, const Tensor<double>& grad, const std::vector<double>& dir, double floor) {
    const Mp50 fd = central_difference(loss, x, dir, eps);
    const DirectionalCheck a =
        directional_derivative(std::span(grad.data(), grad.values().size()), std::span(dir), floor);
    RC_ASSERT(directional_error(a, static_cast<double>(fd), noise) <= kFiniteDifferenceTolerance);
  };
  check(m.hidden, g.hidden_grad, random_direction(m.hidden.numel(), c.spec.seed), floors.hidden);
  check(m.lm_head, *g.lm_head_grad, random_direction(m.lm_head.numel(), c.spec.seed + 1), floors.lm_head);
  std::vector<double> single(static_cast<std::size_t>(m.hidden.numel()), 0.0);
  single[static_cast<std::size_t>(*rc::gen::inRange<std::int64_t>(0, m.hidden.numel()))] = 1.0;
  check(m.hidden, g.hidden_grad, single, floors.hidden);
}

// Extreme logits (spread ~1e4, tau = 0.05: z/tau spans ~2e5) stay finite in double and agree
// with the same computation in 50 digits. The statistics are shift-invariant (running max), so
// the only loss of accuracy is the O(eps * |lse|) of subtracting log-partition functions, and the
// O(eps) absolute accuracy of saturated probabilities in the gradients (GradientFloors): 1e-12
// relative (SPEC §10's reference bound) measured against those scales.
RC_GTEST_PROP(LossHeadProperties, ExtremeLogitsStayFiniteAndAgreeWithFiftyDigits, ()) {
  Case c = *gen_case(6, 4, 20);
  c.spec.logit_scale = 1e4;
  c.options.temperature = 0.05;
  MemoryTracker data;
  const auto p = make_loss_head_problem<double>(data, c.spec);
  const auto r = run(data, p, c.options, LossPolicy::chunk_grad_in_forward, c.options.chunk_rows);
  RC_ASSERT(std::isfinite(r.stats.loss) && std::isfinite(r.stats.kl) && std::isfinite(r.stats.ce));
  for (double v : r.hidden_grad.values()) RC_ASSERT(std::isfinite(v));
  for (double v : r.lse.values()) RC_ASSERT(std::isfinite(v));
  const auto m = convert_problem<Mp50>(data, p);
  MemoryTracker t;
  const auto exact = hybrid_loss_unchunked(t, c.options, m.hidden, m.targets(), m.weight_sum);
  const GradientFloors floors = gradient_floors(c.options, p.hidden, p.targets(), p.weight_sum);
  RC_ASSERT(loss_head_result_error(r, exact, floors) <= kReferenceTolerance);
}

// W = 0: the loss and every gradient are exactly 0 (SPEC §5), under every policy.
RC_GTEST_PROP(LossHeadProperties, ZeroWeightGivesExactlyZero, ()) {
  Case c = *gen_case(10, 6, 30);
  c.spec.all_weights_zero = true;
  c.options.lm_head_grad = true;
  MemoryTracker data;
  const auto p = make_loss_head_problem<double>(data, c.spec);
  for (LossPolicy policy : kAllLossPolicies) {
    const auto r = run(data, p, c.options, policy, c.options.chunk_rows);
    RC_ASSERT(r.stats.loss == 0.0 && r.stats.ce == 0.0 && r.stats.kl == 0.0);
    for (double v : r.hidden_grad.values()) RC_ASSERT(v == 0.0);
    for (double v : r.lm_head_grad->values()) RC_ASSERT(v == 0.0);
  }
}

// The tracker's peaks equal what each policy is documented to keep (reference/loss_head.hpp),
// with b = 8 bytes (double), T rows, H hidden, V vocab, c = min(chunk, T):
//   materialize, chunk_retain   loss_saved = 2 T V b + 3 T b (+ T H b with dW)   transient = 0
//   chunk_recompute             loss_saved = T H b + 3 T b                       transient = 2 c V b
//   chunk_grad_in_forward       loss_saved = T H b                               transient = 2 c V b + 3 T b
// So chunk_recompute holds O(T H) inputs and O(T) statistics whatever the number of chunks,
// chunk_retain grows linearly with the number of chunks (2 c V b per chunk), and materialize holds
// T x V. Outputs are 2 T b (lse, token loss); gradients T H b (+ V H b with dW).
RC_GTEST_PROP(LossHeadProperties, PeakBytesFollowTheClosedFormOfEachPolicy, ()) {
  const Case c = *gen_case(24, 8, 40);
  MemoryTracker data;
  const auto p = make_loss_head_problem<double>(data, c.spec);
  const std::size_t b = sizeof(double), T = c.spec.rows, H = c.spec.hidden, V = c.spec.vocab;
  const bool dw = c.options.lm_head_grad;
  for (LossPolicy policy : kAllLossPolicies) {
    MemoryTracker t;
    LossHeadOptions o = c.options;
    o.policy = policy;
    run_loss_head(t, o, p.hidden, p.targets(), p.weight_sum);
    const std::size_t chunk = policy == LossPolicy::materialize ? T : std::min<std::size_t>(o.chunk_rows, T);
    std::size_t saved = 0, transient = 0;
    switch (policy) {
      case LossPolicy::materialize:
      case LossPolicy::chunk_retain:
        saved = 2 * T * V * b + 3 * T * b + (dw ? T * H * b : 0);
        break;
      case LossPolicy::chunk_recompute:
        saved = T * H * b + 3 * T * b;
        transient = 2 * chunk * V * b;
        break;
      case LossPolicy::chunk_grad_in_forward:
        saved = T * H * b;
        transient = 2 * chunk * V * b + 3 * T * b;
        break;
    }
    RC_ASSERT(t.peak(MemoryCategory::loss_saved) == saved);
    RC_ASSERT(t.peak(MemoryCategory::transient) == transient);
    RC_ASSERT(t.peak(MemoryCategory::outputs) == 2 * T * b);
    RC_ASSERT(t.peak(MemoryCategory::gradients) == T * H * b + (dw ? V * H * b : 0));
    RC_ASSERT(t.current_total() == 0u);
  }
}

// The memory story of BACKGROUND.md in one comparison: at a fixed chunk size, doubling the rows
// doubles what chunk_retain keeps (its V-wide chunks pile up) but leaves chunk_recompute's
// V-wide workspace unchanged.
RC_GTEST_PROP(LossHeadProperties, RetainGrowsWithChunksRecomputeDoesNot, ()) {
  Case c = *gen_case(8, 4, 40);
  c.spec.vocab = std::max<std::int64_t>(c.spec.vocab, 8 * c.spec.hidden);  // the V-wide terms dominate
  c.options.chunk_rows = *rc::gen::inRange<std::int64_t>(1, c.spec.rows + 1);
  c.options.lm_head_grad = false;
  auto peaks = [&](std::int64_t rows, LossPolicy policy) {
    LossHeadProblemSpec spec = c.spec;
    spec.rows = rows;
    MemoryTracker data, t;
    const auto p = make_loss_head_problem<double>(data, spec);
    LossHeadOptions o = c.options;
    o.policy = policy;
    run_loss_head(t, o, p.hidden, p.targets(), p.weight_sum);
    return std::pair{t.peak(MemoryCategory::loss_saved), t.peak(MemoryCategory::transient)};
  };
  const std::int64_t T = c.spec.rows;
  const auto retain1 = peaks(T, LossPolicy::chunk_retain), retain2 = peaks(2 * T, LossPolicy::chunk_retain);
  const auto recompute1 = peaks(T, LossPolicy::chunk_recompute), recompute2 = peaks(2 * T, LossPolicy::chunk_recompute);
  RC_ASSERT(retain2.first == 2 * retain1.first);
  RC_ASSERT(recompute2.second == recompute1.second);
  RC_ASSERT(recompute2.first == 2 * recompute1.first);  // only the O(T H + T) rows and statistics grow
  RC_ASSERT(recompute2.first < retain2.first);
}

}  // namespace
}  // namespace dflash
