// The host plan of a CUDA training rank (planner/host_memory.hpp): every term by hand at full
// scale (the figures bench/results/host_memory.md gives by the sizes of the same allocations), the
// phases and peaks from the terms, ZeRO-0 against ZeRO-1, what grows with the step's sequences, the
// node's ranks, and no host plan at reference precision. That each term is the bytes the code
// allocates is tests/distributed/run/test_host_memory_plan.cpp's to show.
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "planner/host_memory.hpp"
#include "tests/planner/expect_input_error.hpp"
#include "tests/planner/source_configs.hpp"

namespace dflash {
namespace {

constexpr std::int64_t kP = 1'730'213'120;  // the full-scale drafter's trainable parameters

TEST(HostMemoryPlan, FullScaleTermsByHand) {
  const HostMemoryPlan h = *plan_host_memory(full_scale_request());  // 8 GPUs, ZeRO-1, S 4096, one sequence
  // P rounded up to 8 x 128 = 1024: 1,689,662 x 1024 = 1,730,213,888; the shard is an eighth.
  const std::int64_t shard = 216'276'736;
  EXPECT_EQ(h.optimizer_part, 3 * shard * 8);
  EXPECT_EQ(h.checkpoint_slice, 3 * shard * 8);  // rank 0's shard lies below P
  EXPECT_EQ(h.part_upload, 3 * shard * 4);
  EXPECT_EQ(h.frozen_piece, (std::int64_t(1) << 20) * 10);  // V H = 1.27e9 > 2^20
  const std::int64_t S = 4096, H = 5120, KH = 5 * 5120, T = 32768, N = 1024;
  EXPECT_EQ(h.step_batch, S * (8 + 1 + (KH + H) * 2));  // ids, mask, F and G in bf16
  EXPECT_EQ(h.upload_staging, T * H * 2);               // the gathered teacher rows; F is uploaded from step_batch
  EXPECT_EQ(h.sequence_tables, N * 9 + T * 41 + (N + 2 * T));
  EXPECT_EQ(h.checkpoint_gather, 2 * kP * 4);
  EXPECT_EQ(h.ranks_per_node, 8);

  EXPECT_EQ(h.fresh_start(), 7'796'448'256);  // 5.19 GB of doubles, 2.60 GB of floats, one piece
  EXPECT_EQ(h.resumed_start(), h.checkpoint_slice + h.optimizer_part);
  EXPECT_EQ(h.steps(), h.step_batch + h.upload_staging + h.sequence_tables);
  EXPECT_EQ(h.checkpoint_write(), h.upload_staging + h.checkpoint_gather);
  EXPECT_EQ(h.rank_peak(), h.resumed_start());     // 10.38 GB
  EXPECT_EQ(h.lead_peak(), h.checkpoint_write());  // 14.43 GB
  EXPECT_EQ(h.node_peak(), 7 * h.rank_peak() + h.lead_peak());
}

// ZeRO-0 keeps the whole vectors on every rank; the shard's padding is counted where the host state
// holds it (the part in double) and not where only the part below P is (the slice, the upload).
TEST(HostMemoryPlan, ZeroStageDecidesThePart) {
  PlanRequest r = full_scale_request();
  r.layout.zero_stage = 0;
  const HostMemoryPlan z0 = *plan_host_memory(r);
  EXPECT_EQ(z0.optimizer_part, 3 * kP * 8);
  EXPECT_EQ(z0.part_upload, 3 * kP * 4);
  EXPECT_EQ(z0.checkpoint_gather, 2 * kP * 4);  // the same: the gather is whole either way

  r.layout.zero_stage = 1;
  r.layout.gpus = 3;  // P rounded up to a multiple of 3 x 128 = 384
  const HostMemoryPlan z1 = *plan_host_memory(r);
  const std::int64_t padded = (kP + 383) / 384 * 384, shard = padded / 3;
  EXPECT_GT(padded, kP);
  EXPECT_EQ(z1.optimizer_part, 3 * shard * 8);
  EXPECT_EQ(z1.part_upload, 3 * shard * 4);  // rank 0's shard lies below P, the last holds the padding
}

// Every sequence of a rank's step is held at once, F and G in bf16: b sequences per micro-step, U
// micro-steps, S rows each. The staging and the start do not grow with them.
TEST(HostMemoryPlan, TheStepHoldsEverySequenceOfTheRank) {
  PlanRequest r = full_scale_request();
  const HostMemoryPlan one = *plan_host_memory(r);
  r.sequences = 2;
  r.micro_steps = 3;
  r.context = 8192;
  const HostMemoryPlan six = *plan_host_memory(r);
  EXPECT_EQ(six.step_batch, 6 * 2 * one.step_batch);
  EXPECT_EQ(six.sequence_tables - one.sequence_tables, 5 * (1024 + 2 * 32768));
  EXPECT_EQ(six.upload_staging, one.upload_staging);  // T block rows, whatever S
  EXPECT_EQ(six.fresh_start(), one.fresh_start());
  // 6 sequences of 8192 rows: 3.36 GB (12.92 GB when every one was held in double, 3.78 GB while
  // F went up through the staging)
  EXPECT_EQ(six.steps(), 3'357'637'632);
  EXPECT_LT(six.steps(), six.resumed_start());
  r.micro_steps = 12;  // 24 sequences, 12.42 GB: the steps are the rank's peak
  const HostMemoryPlan many = *plan_host_memory(r);
  EXPECT_GT(many.steps(), many.resumed_start());
  EXPECT_EQ(many.rank_peak(), many.steps());
}

TEST(HostMemoryPlan, NodeCountsItsRanksOnce) {
  PlanRequest r = full_scale_request();
  r.layout.gpus = 16;
  const HostMemoryPlan two_nodes = *plan_host_memory(r, 8);
  EXPECT_EQ(two_nodes.ranks_per_node, 8);
  EXPECT_EQ(two_nodes.node_peak(), 7 * two_nodes.rank_peak() + two_nodes.lead_peak());
  r.layout.gpus = 2;
  const HostMemoryPlan small = *plan_host_memory(r, 8);
  EXPECT_EQ(small.ranks_per_node, 2);  // a node holds no more ranks than the job has
  EXPECT_EQ(small.node_peak(), small.rank_peak() + small.lead_peak());
  expect_input_error([&] { plan_host_memory(r, 0); }, {"gpus_per_node", "0"});
}

// The reference step computes on the host: its device plan is the host's, and there is no other.
TEST(HostMemoryPlan, NoneAtReferencePrecision) {
  PlanRequest r = full_scale_request();
  r.precision = TrainingPrecision::reference_training();
  EXPECT_FALSE(plan_host_memory(r).has_value());
}

}  // namespace
}  // namespace dflash
