// The loss head's memory: SPEC §8 worked example 1 to the byte, and the per-category model held
// against the reference loss head's tracker on small problems (every policy, dL/dW_lm or not).
#include <gtest/gtest.h>

#include "planner/loss_head_memory.hpp"
#include "planner/plan_vs_measured.hpp"
#include "reference/loss_head.hpp"
#include "reference/loss_head_problem.hpp"
#include "tests/planner/expect_input_error.hpp"

namespace dflash {
namespace {

// SPEC §8: bf16, T 32768, H 5120, V 248320, chunk 2048.
LossHeadShape loss_head_spec_example() {
  return {.rows = 32768, .hidden = 5120, .vocab = 248320, .chunk_rows = 2048, .element_bytes = 2, .statistic_bytes = 4};
}

TEST(LossHeadMemory, SpecWorkedExampleToTheByte) {
  const LossHeadHeadline h = loss_head_headline(loss_head_spec_example());
  EXPECT_EQ(h.full_logits_bytes, 16'273'899'520);
  EXPECT_EQ(h.chunk_logits_bytes, 1'017'118'720);
  EXPECT_EQ(h.saved(LossPolicy::chunk_retain), 32'547'799'040);
  EXPECT_EQ(h.saved(LossPolicy::chunk_recompute), 335'544'320);
  EXPECT_EQ(h.saved_input_bytes, 335'544'320);
}

TEST(LossHeadMemory, HeadlineOrderingOfPolicies) {
  const LossHeadHeadline h = loss_head_headline(loss_head_spec_example());
  // materialize keeps what chunk_retain keeps (chunking did not help); dL/dY is as wide as the rows.
  EXPECT_EQ(h.saved(LossPolicy::materialize), h.saved(LossPolicy::chunk_retain));
  EXPECT_EQ(h.saved(LossPolicy::chunk_grad_in_forward), h.saved(LossPolicy::chunk_recompute));
  EXPECT_EQ(h.saved(LossPolicy::chunk_retain), 2 * h.full_logits_bytes);
  EXPECT_EQ(h.full_logits_bytes, 16 * h.chunk_logits_bytes);
}

TEST(LossHeadMemory, FullBytesAddTheRowStatisticsToTheHeadline) {
  const LossHeadShape s = loss_head_spec_example();
  const LossHeadHeadline h = loss_head_headline(s);
  const std::int64_t stats = 3 * s.rows * s.statistic_bytes;
  EXPECT_EQ(loss_head_memory(s, LossPolicy::chunk_retain)[PlanCategory::loss_saved],
            h.saved(LossPolicy::chunk_retain) + stats);
  EXPECT_EQ(loss_head_memory(s, LossPolicy::chunk_recompute)[PlanCategory::loss_saved],
            h.saved(LossPolicy::chunk_recompute) + stats);
  EXPECT_EQ(loss_head_memory(s, LossPolicy::chunk_recompute)[PlanCategory::transient], 2 * h.chunk_logits_bytes);
  EXPECT_EQ(loss_head_memory(s, LossPolicy::chunk_grad_in_forward)[PlanCategory::transient],
            2 * h.chunk_logits_bytes + stats);
}

TEST(LossHeadMemory, ChunkLargerThanTheRowsIsOneChunk) {
  LossHeadShape s = loss_head_spec_example();
  s.rows = 1000;
  EXPECT_EQ(loss_head_headline(s).chunk_logits_bytes, loss_head_headline(s).full_logits_bytes);
}

TEST(LossHeadMemory, ZeroChunkRowsIsNamed) {
  LossHeadShape s = loss_head_spec_example();
  s.chunk_rows = 0;
  expect_input_error([&] { loss_head_headline(s); }, {"loss_chunk_rows", "0"});
}

TEST(LossHeadMemory, NegativeRowsAreNamed) {
  LossHeadShape s = loss_head_spec_example();
  s.rows = -3;
  expect_input_error([&] { loss_head_memory(s, LossPolicy::materialize); }, {"tokens", "-3"});
}

TEST(LossHeadMemory, OverflowIsRefused) {
  LossHeadShape s = loss_head_spec_example();
  s.rows = std::int64_t(1) << 50;  // T V b needs about 2^68
  expect_input_error([&] { loss_head_headline(s); }, {"overflows 64 bits"});
}

// The CUDA loss head at SPEC §8's shape, fp32 dL/dY, written out term by term: T 32768, H 5120,
// V 248320, c 2048.
TEST(LossHeadMemory, CudaSpecExampleToTheByte) {
  LossHeadShape s = loss_head_spec_example();
  s.gradient_bytes = 4;
  const CategoryBytes gif = cuda_loss_head_memory(s, LossPolicy::chunk_grad_in_forward);
  // dL/dY T H 4 kept from forward
  EXPECT_EQ(gif[PlanCategory::loss_saved], 671'088'640);
  // z, t 2 c V 2 + statistics 3 T 4 + the valid-row list T 4 + the chunk's rows c H 4 + scratch 9 T
  EXPECT_EQ(gif[PlanCategory::transient], 2'034'237'440 + 393'216 + 131'072 + 41'943'040 + 294'912);
  EXPECT_LT(gif[PlanCategory::transient], std::int64_t(2) << 30);  // the target: transient <= 2 GiB
  EXPECT_EQ(gif[PlanCategory::gradients], 671'088'640);
  EXPECT_EQ(gif[PlanCategory::outputs], 2 * 32768 * 4);

  const CategoryBytes rc = cuda_loss_head_memory(s, LossPolicy::chunk_recompute);
  EXPECT_EQ(rc[PlanCategory::loss_saved], 335'544'320 + 393'216 + 131'072);  // Y copy, statistics, list
  EXPECT_EQ(rc[PlanCategory::transient], 2'034'237'440 + 41'943'040 + 294'912);

  const CategoryBytes mat = cuda_loss_head_memory(s, LossPolicy::materialize);
  EXPECT_EQ(mat[PlanCategory::loss_saved], 32'547'799'040 + 393'216 + 131'072);
  EXPECT_EQ(mat[PlanCategory::transient], 671'088'640 + 294'912);  // one "chunk" of all T rows
}

TEST(LossHeadMemory, CudaRefusesWhatItDoesNotOffer) {
  LossHeadShape s = loss_head_spec_example();
  expect_input_error([&] { cuda_loss_head_memory(s, LossPolicy::chunk_retain); }, {"loss_policy", "chunk_retain"});
  s.lm_head_grad = true;
  expect_input_error([&] { cuda_loss_head_memory(s, LossPolicy::chunk_recompute); }, {"lm_head_grad"});
}

// The plan of one run_loss_head call (the caller's inputs and lm_head included) against the peaks
// the reference's tracker records. The model is exact for the loss head: no slack at all.
struct SmallCase {
  LossHeadProblemSpec spec;
  std::int64_t chunk_rows;
};

class LossHeadAgainstReference : public testing::TestWithParam<std::tuple<LossPolicy, bool>> {};

TEST_P(LossHeadAgainstReference, EveryCategoryMatchesTheTrackerExactly) {
  const auto [policy, lm_head_grad] = GetParam();
  for (const SmallCase& c : {SmallCase{{.rows = 7, .hidden = 3, .vocab = 11, .seed = 1}, 3},
                             SmallCase{{.rows = 5, .hidden = 4, .vocab = 9, .seed = 2}, 9},
                             SmallCase{{.rows = 1, .hidden = 2, .vocab = 3, .seed = 3}, 1}}) {
    MemoryTracker tracker;
    const LossHeadProblem<double> p = make_loss_head_problem<double>(tracker, c.spec);
    LossHeadOptions o;
    o.policy = policy;
    o.chunk_rows = c.chunk_rows;
    o.lm_head_grad = lm_head_grad;
    const LossHeadResult<double> r = run_loss_head(tracker, o, p.hidden, p.targets(), p.weight_sum);

    const LossHeadShape shape{.rows = c.spec.rows,
                              .hidden = c.spec.hidden,
                              .vocab = c.spec.vocab,
                              .chunk_rows = c.chunk_rows,
                              .element_bytes = 8,
                              .statistic_bytes = 8,
                              .lm_head_grad = lm_head_grad};
    CategoryBytes plan = loss_head_memory(shape, policy);
    plan[PlanCategory::inputs] = 2 * c.spec.rows * c.spec.hidden * 8;  // Y and the teacher rows
    plan[PlanCategory::frozen] = c.spec.vocab * c.spec.hidden * 8;     // lm_head
    const auto comparisons = compare_plan_with_tracker(plan, tracker);
    for (const CategoryComparison& k : comparisons) {
      EXPECT_EQ(k.planned, k.measured) << category_name(k.category) << " T=" << c.spec.rows << " c=" << c.chunk_rows
                                       << "\n"
                                       << comparison_report(comparisons);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, LossHeadAgainstReference,
                         testing::Combine(testing::ValuesIn(kAllLossPolicies), testing::Bool()), [](const auto& info) {
                           return std::string(loss_policy_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_with_lm_head_grad" : "");
                         });

}  // namespace
}  // namespace dflash
