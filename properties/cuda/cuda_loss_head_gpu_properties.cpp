// Properties of the CUDA loss head on random shapes (T, H, V multiples of nothing, V % 8 == 0 or
// not, chunk 1 .. beyond T, tau in [0.05, 4], h and s in [0, 1], zero weights, rows without labels,
// logits up to +-1000): within SPEC §10's bf16 rule of the double reference, bitwise agreement of
// the two chunked policies, and W as a pure input (ranks will share it).
//
// Each property is one GoogleTest that skips, with the reason, where no GPU is usable, and
// otherwise runs RapidCheck (RC_PARAMS as for every property binary) and asserts its verdict.
#include <ostream>

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "cuda/loss_head/problem.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "reference/bf16_tolerance.hpp"
#include "reference/loss_head_compare.hpp"

namespace dflash {
namespace {

struct Case {
  LossHeadProblemSpec spec;
  LossHeadOptions options;
};

void showValue(const Case& c, std::ostream& os) {
  os << "T=" << c.spec.rows << " H=" << c.spec.hidden << " V=" << c.spec.vocab << " seed=" << c.spec.seed
     << " logit_scale=" << c.spec.logit_scale << " teacher_scale=" << c.spec.teacher_scale
     << " zero_w=" << c.spec.zero_weight_fraction << " tau=" << c.options.temperature << " h=" << c.options.hard_weight
     << " s=" << c.options.soft_weight << " policy=" << loss_policy_name(c.options.policy)
     << " chunk=" << c.options.chunk_rows;
}

rc::Gen<Case> gen_case() {
  return rc::gen::exec([] {
    Case c;
    c.spec.rows = *rc::gen::inRange(1, 49);
    c.spec.hidden = *rc::gen::inRange(1, 41);
    const bool aligned = *rc::gen::arbitrary<bool>();
    c.spec.vocab = aligned ? 8 * *rc::gen::inRange(1, 120) : *rc::gen::inRange(1, 961);
    c.spec.seed = *rc::gen::arbitrary<std::uint32_t>();
    c.spec.logit_scale = *rc::gen::element(0.5, 4.0, 12.0, 1000.0);
    c.spec.teacher_scale = *rc::gen::element(0.5, 1.0, 3.0);
    c.spec.invalid_fraction = *rc::gen::element(0.0, 0.3);
    c.spec.zero_weight_fraction = *rc::gen::element(0.0, 0.3);
    c.options.temperature = *rc::gen::inRange(50, 4001) / 1000.0;
    c.options.hard_weight = *rc::gen::inRange(0, 101) / 100.0;
    c.options.soft_weight = *rc::gen::inRange(0, 101) / 100.0;
    c.options.policy =
        *rc::gen::element(LossPolicy::materialize, LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward);
    const std::int64_t T = c.spec.rows;
    c.options.chunk_rows = *rc::gen::oneOf(rc::gen::just(std::int64_t{1}), rc::gen::inRange<std::int64_t>(1, T + 1),
                                           rc::gen::inRange<std::int64_t>(T, T + 6));
    return c;
  });
}

using CudaLossHeadProperties = GpuTest;

TEST_F(CudaLossHeadProperties, WithinTwiceThePlainBf16ErrorPlusFloorOfTheReference) {
  DeviceAllocator& device = allocator();
  EXPECT_TRUE(rc::check("CUDA loss head within 2 x plain bf16 error + floor of the double reference", [&] {
    const Case c = *gen_case();
    MemoryTracker host;
    const Bf16RuleOracle oracle(make_loss_head_problem<double>(host, c.spec), c.options);
    const CudaLossHeadProblem p = upload_loss_head_problem(device, oracle.device_problem());
    const Bf16RuleReport report = oracle.check(run_loss_head_cuda(device, host, c.options, p));
    RC_LOG() << report.describe();
    RC_ASSERT(report.ok());
  }));
}

TEST_F(CudaLossHeadProperties, ChunkRecomputeAndChunkGradInForwardAgreeBitwise) {
  DeviceAllocator& device = allocator();
  EXPECT_TRUE(rc::check("chunk_recompute and chunk_grad_in_forward give the same bits", [&] {
    Case c = *gen_case();
    MemoryTracker host;
    const CudaLossHeadProblem p = upload_loss_head_problem(device, make_loss_head_problem<double>(host, c.spec));
    c.options.policy = LossPolicy::chunk_recompute;
    const LossHeadResult<double> a = run_loss_head_cuda(device, host, c.options, p);
    c.options.policy = LossPolicy::chunk_grad_in_forward;
    const LossHeadResult<double> b = run_loss_head_cuda(device, host, c.options, p);
    RC_ASSERT(loss_head_results_identical(a, b));
  }));
}

// W is the global weight sum, an input: doubling it halves loss, ce, kl and every dL/dY entry
// exactly (a power-of-two scale commutes with every rounding on the way), and changes nothing
// else. Exact only while no value on the way is subnormal (halving one rounds), so here the
// logits stay moderate (scale <= 4), tau >= 0.5 and h >= 0.1: every probability is >= e^-60.
TEST_F(CudaLossHeadProperties, TheGlobalWeightSumOnlyScales) {
  DeviceAllocator& device = allocator();
  EXPECT_TRUE(rc::check("doubling W halves loss and gradient exactly", [&] {
    Case c = *gen_case();
    c.spec.logit_scale = *rc::gen::element(0.5, 4.0);
    c.spec.teacher_scale = *rc::gen::element(0.5, 1.0);
    c.options.temperature = *rc::gen::inRange(500, 4001) / 1000.0;
    c.options.hard_weight = *rc::gen::inRange(10, 101) / 100.0;
    MemoryTracker host;
    CudaLossHeadProblem p = upload_loss_head_problem(device, make_loss_head_problem<double>(host, c.spec));
    RC_PRE(p.weight_sum > 0);
    const LossHeadResult<double> a = run_loss_head_cuda(device, host, c.options, p);
    p.weight_sum *= 2;
    const LossHeadResult<double> b = run_loss_head_cuda(device, host, c.options, p);
    RC_ASSERT(b.stats.loss == a.stats.loss / 2 && b.stats.ce == a.stats.ce / 2 && b.stats.kl == a.stats.kl / 2);
    RC_ASSERT(b.stats.correct == a.stats.correct);
    RC_ASSERT(b.lse.values() == a.lse.values());
    RC_ASSERT(b.token_loss.values() == a.token_loss.values());
    for (std::int64_t e = 0; e < a.hidden_grad.numel(); ++e) RC_ASSERT(b.hidden_grad[e] == a.hidden_grad[e] / 2);
  }));
}

}  // namespace
}  // namespace dflash
