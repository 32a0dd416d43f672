// The training-step plan: parameters and optimizer state under ZeRO 0/1, the device verdict and its
// headroom, the loss head of the full-scale config (SPEC §8 example 1 inside a plan), the trunk
// policies against each other, the verdict matrix, and bad requests named by field.
#include <filesystem>

#include <gtest/gtest.h>

#include "planner/communication_time.hpp"
#include "planner/cuda_trunk_memory.hpp"
#include "planner/policy_verdicts.hpp"
#include "planner/training_plan.hpp"
#include "reference/drafter_parameters.hpp"
#include "tests/planner/expect_input_error.hpp"
#include "tests/planner/source_configs.hpp"

namespace dflash {
namespace {

TEST(TrainingPlan, DefaultsAreTheSpecTrainingStep) {
  const PlanRequest r = full_scale_request();
  EXPECT_EQ(r.tokens, 32768);  // SPEC §1: B 32 x max_anchors 1024
  EXPECT_EQ(r.context, kDefaultContextLength);
  EXPECT_EQ(r.layout.gpus, 8);
  EXPECT_EQ(r.device_bytes, 95'000'000'000);
  EXPECT_EQ(r.loss_policy, r.config.loss_policy);
  EXPECT_EQ(r.trunk_policy, r.config.trunk_policy);
}

TEST(TrainingPlan, LossHeadOfTheFullScaleConfigIsSpecExampleOne) {
  PlanRequest r = full_scale_request();
  r.loss_chunk_rows = 2048;
  const MemoryPlan plan = plan_training_memory(r);
  EXPECT_EQ(plan.loss_head.full_logits_bytes, 16'273'899'520);
  EXPECT_EQ(plan.loss_head.chunk_logits_bytes, 1'017'118'720);
  EXPECT_EQ(plan.loss_head.saved(LossPolicy::chunk_retain), 32'547'799'040);
  EXPECT_EQ(plan.loss_head.saved(LossPolicy::chunk_recompute), 335'544'320);
  EXPECT_EQ(plan.loss_head.saved_input_bytes, 335'544'320);
}

TEST(TrainingPlan, ParameterCategoriesFollowThePrecisionRecipe) {
  PlanRequest r = full_scale_request();
  r.layout = {.gpus = 1, .zero_stage = 0};
  const MemoryPlan plan = plan_training_memory(r);
  const std::int64_t P = drafter_parameter_count(r.config);
  const std::int64_t V = r.config.vocab_size, H = r.config.hidden_size;
  EXPECT_EQ(plan.parameters.trainable, P);
  EXPECT_EQ(plan.parameters.frozen, 2 * V * H);
  const CategoryBytes& c = plan.categories;
  const std::int64_t norms = plan.parameters.norm_weights;
  EXPECT_EQ(norms, 2 * H + r.config.num_hidden_layers * (2 * H + 2 * r.config.head_dim));  // 2 per layer + q/k norms
  EXPECT_EQ(c[PlanCategory::parameters], 2 * (P - norms) + 4 * norms);  // bf16 matrices, fp32 norm weights (CUDA step)
  EXPECT_EQ(c[PlanCategory::frozen], 2 * 2 * V * H);                    // bf16 embedding + lm_head
  EXPECT_EQ(c[PlanCategory::master_weights], 4 * P);                    // fp32
  EXPECT_EQ(c[PlanCategory::optimizer_state], 8 * P);                   // fp32 m and v
  EXPECT_EQ(c[PlanCategory::communication], 0);                         // one GPU: nothing to reduce
}

TEST(TrainingPlan, ZeroOneShardsMasterWeightsAndMomentsOnly) {
  PlanRequest r = full_scale_request();
  r.layout = {.gpus = 8, .zero_stage = 0};
  const MemoryPlan zero0 = plan_training_memory(r);
  r.layout.zero_stage = 1;
  const MemoryPlan zero1 = plan_training_memory(r);
  // TRAINING §13: P padded to a multiple of 8 x 128, then split eight ways.
  const std::int64_t P = zero0.parameters.trainable, shard = (P + 1023) / 1024 * 128;
  EXPECT_EQ(zero1.categories[PlanCategory::master_weights], 4 * shard);
  EXPECT_EQ(zero1.categories[PlanCategory::optimizer_state], 8 * shard);
  for (PlanCategory c : kAllPlanCategories) {
    if (c == PlanCategory::master_weights || c == PlanCategory::optimizer_state) continue;
    EXPECT_EQ(zero0.categories[c], zero1.categories[c]) << plan_category_name(c);
  }
  EXPECT_EQ(zero0.categories[PlanCategory::communication], 2 * kDefaultBucketBytes);
}

// The CUDA step's layout (distributed/cuda/training_state.hpp): the flat gradient padded, master
// and moments of the shard clipped to P, no bucket buffers.
TEST(TrainingPlan, InPlaceFlatLayoutPadsTheGradientClipsTheShardAndHasNoBuckets) {
  PlanRequest r = full_scale_request();
  r.layout = {.gpus = 8, .zero_stage = 1, .in_place_flat = true};
  const MemoryPlan eight = plan_training_memory(r);
  const std::int64_t P = eight.parameters.trainable, padded = (P + 1023) / 1024 * 1024;
  EXPECT_EQ(eight.categories[PlanCategory::communication], 0);
  EXPECT_EQ(eight.categories[PlanCategory::master_weights], 4 * (padded / 8));
  EXPECT_EQ(eight.categories[PlanCategory::optimizer_state], 8 * (padded / 8));
  r.layout.zero_stage = 0;
  const std::int64_t zero0_gradients = plan_training_memory(r).categories[PlanCategory::gradients];
  EXPECT_EQ(eight.categories[PlanCategory::gradients] - zero0_gradients, 4 * (padded - P));
  // One GPU: the shard is the whole vector padded to 128, the part kept only P.
  r.layout = {.gpus = 1, .zero_stage = 1, .in_place_flat = true};
  const MemoryPlan one = plan_training_memory(r);
  EXPECT_EQ(one.categories[PlanCategory::master_weights], 4 * P);
  EXPECT_EQ(one.categories[PlanCategory::optimizer_state], 8 * P);
}

TEST(TrainingPlan, TotalIsTheSumOfCategoriesAndDecidesTheVerdict) {
  const MemoryPlan plan = plan_training_memory(full_scale_request());
  std::int64_t sum = 0;
  for (PlanCategory c : kAllPlanCategories) sum += plan.categories[c];
  EXPECT_EQ(plan.fit.total_bytes, sum);
  EXPECT_EQ(plan.fit.fits, sum <= plan.fit.usable_bytes);
}

TEST(DeviceFit, HeadroomIsFivePercentOrTwoGiB) {
  EXPECT_EQ(device_fit(0, 95'000'000'000).headroom_bytes, 4'750'000'000);
  EXPECT_EQ(device_fit(0, std::int64_t(20) << 30).headroom_bytes, std::int64_t(2) << 30);
  const DeviceFit edge = device_fit(95'000'000'000 - 4'750'000'000, 95'000'000'000);
  EXPECT_TRUE(edge.fits);
  EXPECT_EQ(edge.free_bytes(), 0);
  EXPECT_FALSE(device_fit(edge.total_bytes + 1, 95'000'000'000).fits);
  expect_input_error([] { device_fit(0, 0); }, {"gpu_memory"});
}

TEST(TrainingPlan, TrunkPoliciesOrderAsTheyShould) {
  PlanRequest r = full_scale_request();
  r.trunk_policy = TrunkPolicy::none;
  const MemoryPlan none = plan_training_memory(r);
  r.trunk_policy = TrunkPolicy::per_layer;
  const MemoryPlan per_layer = plan_training_memory(r);
  r.trunk_policy = TrunkPolicy::every_k;
  r.checkpoint_every = 1;
  const MemoryPlan every_1 = plan_training_memory(r);
  r.checkpoint_every = r.config.num_hidden_layers;
  const MemoryPlan every_all = plan_training_memory(r);
  EXPECT_LT(per_layer.trunk.saved_bytes, none.trunk.saved_bytes);
  EXPECT_EQ(every_1.trunk.saved_bytes, per_layer.trunk.saved_bytes);  // k = 1 is per_layer
  // One segment of every layer, rebuilt in backward: the activations of `none` plus the first input.
  EXPECT_GT(every_all.trunk.saved_bytes, per_layer.trunk.saved_bytes);
  // Everything kept: the sum of all layers' activations is inside `none`'s saved bytes.
  EXPECT_GT(none.trunk.saved_bytes, none.activations.all_layers_bytes);
  EXPECT_EQ(none.activations.residual_only_bytes,  // the CUDA trunk's residual stream is fp32
            r.config.num_hidden_layers * r.tokens * r.config.hidden_size * kCudaTrunkFp32Bytes);
}

// Production precision plans what the CUDA step allocates (cuda_drafter_step, held against the
// device in tests/cuda/drafter/test_drafter_step_gpu.cpp; the trunk's closed form against its code on the
// CPU backend in tests/cuda/trunk/test_trunk_memory_cpu.cpp); the reference precision the reference's.
TEST(TrainingPlan, ProductionPlansTheCudaStep) {
  PlanRequest r = full_scale_request();
  r.layout = {.gpus = 1, .zero_stage = 0};
  const MemoryPlan plan = plan_training_memory(r);
  const DrafterDims m = DrafterDims::of(r.config, r.context, r.tokens / r.config.block_size);
  const CudaTrunkMemory cuda = cuda_trunk_memory(m, TrunkPolicy::per_layer, 1, 2);
  const CategoryBytes& c = plan.categories;
  ASSERT_EQ(r.trunk_policy, TrunkPolicy::per_layer);
  // per_layer: C with its fc output, every fp32 layer input, one layer rebuilt (larger than X_L).
  EXPECT_EQ(c[PlanCategory::saved], cuda.context_bytes + m.L * 4 * m.T * m.H + cuda.layer_activation_bytes);
  EXPECT_EQ(plan.trunk.transient_bytes, cuda.transient_bytes);
  const std::int64_t P = plan.parameters.trainable;
  EXPECT_EQ(c[PlanCategory::gradients], 4 * P + 4 * m.T * m.H);  // + dL/dY; the training step makes no dL/dF
  EXPECT_EQ(c[PlanCategory::inputs],
            8 * m.S + 9 * m.N + 29 * m.T + 2 * m.S * m.K * m.H + 2 * m.T * m.H);  // one sequence's upload
  r.precision.trunk = TrunkMemoryModel::reference;
  const MemoryPlan reference = plan_training_memory(r);
  EXPECT_EQ(reference.trunk.saved_tensors.peak_elements, trunk_saved_plan(m, TrunkPolicy::per_layer, 1).peak_elements);
  EXPECT_LT(reference.categories[PlanCategory::saved], c[PlanCategory::saved]);  // bf16 residual, fewer tensors
}

// The activation summary of the CUDA trunk under every_k keeps one fp32 layer input per segment:
// ceil(L / k) of them (L = 5: k = 2 keeps 3, k = 5 keeps 1), beside C and X_L.
TEST(TrainingPlan, CudaEveryKKeepsOneBoundaryPerSegment) {
  PlanRequest r = full_scale_request();
  r.layout = {.gpus = 1, .zero_stage = 0};
  r.trunk_policy = TrunkPolicy::every_k;
  const DrafterDims m = DrafterDims::of(r.config, r.context, r.tokens / r.config.block_size);
  ASSERT_EQ(m.L, 5);
  for (const auto& [k, segments] : {std::pair{1, 5}, std::pair{2, 3}, std::pair{3, 2}, std::pair{5, 1}}) {
    r.checkpoint_every = k;
    const CudaTrunkMemory cuda = cuda_trunk_memory(m, TrunkPolicy::every_k, k, 2);
    EXPECT_EQ(plan_training_memory(r).activations.boundary_bytes,
              cuda.context_bytes + cuda.final_bytes + segments * cuda.boundary_bytes)
        << "k = " << k;
  }
}

// dL/dF is counted only for a step that makes it (features_grad): the frozen features get no
// gradient in training (TRAINING §14), so the CUDA training step never allocates it; the
// verification steps hand one back per sequence, and the reference's batch-wide copy is per sequence.
TEST(TrainingPlan, FeatureGradientOnlyWhereTheStepMakesIt) {
  PlanRequest r = full_scale_request();
  r.layout = {.gpus = 1, .zero_stage = 0};
  const DrafterDims m = DrafterDims::of(r.config, r.context, r.tokens / r.config.block_size);
  const std::int64_t P = drafter_parameter_counts(r.config).trainable;
  const std::int64_t dY = 4 * m.T * m.H, dF = 4 * m.S * m.K * m.H;
  ASSERT_FALSE(r.features_grad);  // the training step's plan, `dflash plan`'s default
  EXPECT_EQ(plan_training_memory(r).categories[PlanCategory::gradients], 4 * P + dY);
  r.features_grad = true;  // cuda_drafter_step: one sequence's fp32 dL/dF beside dL/dY
  EXPECT_EQ(plan_training_memory(r).categories[PlanCategory::gradients], 4 * P + dF + dY);

  // Reference precision, 3 sequences: the batch's dL/dF [3, S, K H], and one sequence's made after
  // dL/dY is freed (the larger of the two counts).
  r.precision = TrainingPrecision::reference_training();
  r.sequences = 3;
  const std::int64_t dY8 = 8 * m.T * m.H, dF8 = 8 * m.S * m.K * m.H;
  const std::int64_t grads = plan_training_memory(r).categories[PlanCategory::gradients];
  r.features_grad = false;
  const std::int64_t without = plan_training_memory(r).categories[PlanCategory::gradients];
  EXPECT_EQ(grads - without, 3 * dF8 + std::max(dY8, dF8) - dY8);
  EXPECT_EQ(without, 8 * P + dY8);
}

// The reference trunk's statistics follow statistic_bytes (the CUDA trunk's are fp32 by type).
TEST(TrainingPlan, WiderStatisticsOnlyAddTheirDifference) {
  PlanRequest r = full_scale_request();
  r.precision.trunk = TrunkMemoryModel::reference;
  r.precision.statistic_bytes = r.precision.activation_bytes;
  const MemoryPlan narrow = plan_training_memory(r);
  r.precision.statistic_bytes = r.precision.activation_bytes + 2;
  const MemoryPlan wide = plan_training_memory(r);
  const std::int64_t extra = wide.trunk.saved_bytes - narrow.trunk.saved_bytes;
  EXPECT_GT(extra, 0);
  // Statistics are per row (T, T nh, ...), never per hidden value: a small fraction.
  EXPECT_LT(extra * 100, narrow.trunk.saved_bytes);
}

TEST(PolicyVerdicts, EveryCombinationInOrderAndMonotone) {
  const std::vector<PolicyVerdict> v = policy_verdicts(full_scale_request());
  // Production plans the CUDA step, which does not offer chunk_retain.
  ASSERT_EQ(v.size(), (kAllLossPolicies.size() - 1) * kAllTrunkPolicies.size() * 2);
  for (const PolicyVerdict& p : v) EXPECT_NE(p.loss_policy, LossPolicy::chunk_retain);
  for (std::size_t i = 0; i < v.size(); i += 2) {
    EXPECT_EQ(v[i].zero_stage, 0);
    EXPECT_EQ(v[i + 1].zero_stage, 1);
    EXPECT_LT(v[i + 1].total_bytes, v[i].total_bytes);  // sharding only removes bytes
    EXPECT_EQ(v[i].fits, v[i].total_bytes <= v[i].usable_bytes);
  }
  auto total = [&](LossPolicy l, TrunkPolicy t) {
    for (const PolicyVerdict& p : v) {
      if (p.loss_policy == l && p.trunk_policy == t && p.zero_stage == 0) return p.total_bytes;
    }
    return std::int64_t(-1);
  };
  for (TrunkPolicy t : kAllTrunkPolicies) {
    EXPECT_LT(total(LossPolicy::chunk_recompute, t), total(LossPolicy::materialize, t));
    EXPECT_LT(total(LossPolicy::chunk_grad_in_forward, t), total(LossPolicy::materialize, t));
  }
  // Each row plans its own trunk policy: keeping every layer costs more than rebuilding them.
  for (LossPolicy l : {LossPolicy::materialize, LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward}) {
    EXPECT_GT(total(l, TrunkPolicy::none), total(l, TrunkPolicy::per_layer)) << loss_policy_name(l);
  }
}

// One bad field at a time on the full-scale request; the message must name it.
struct BadField {
  const char* field;
  void (*spoil)(PlanRequest&);
};

TEST(TrainingPlan, BadRequestsNameTheField) {
  const BadField cases[] = {
      {"tokens", [](PlanRequest& r) { r.tokens = 100; }},  // not whole blocks of 32
      {"tokens", [](PlanRequest& r) { r.tokens = 0; }},
      {"context", [](PlanRequest& r) { r.context = 0; }},
      {"sequences", [](PlanRequest& r) { r.sequences = 0; }},
      {"loss_chunk_rows", [](PlanRequest& r) { r.loss_chunk_rows = -2; }},
      {"checkpoint_every", [](PlanRequest& r) { r.checkpoint_every = 0; }},
      {"gpus", [](PlanRequest& r) { r.layout.gpus = 0; }},
      {"zero", [](PlanRequest& r) { r.layout.zero_stage = 3; }},
      {"gpu_memory", [](PlanRequest& r) { r.device_bytes = -1; }},
      {"activation element bytes", [](PlanRequest& r) { r.precision.activation_bytes = 0; }},
      {"hidden_size", [](PlanRequest& r) { r.config.hidden_size = 0; }},
      {"plan sizes", [](PlanRequest& r) { r.context = std::int64_t(1) << 50; }},  // overflows 64-bit bytes
  };
  for (const BadField& c : cases) {
    PlanRequest r = full_scale_request();
    c.spoil(r);
    expect_input_error([&] { plan_training_memory(r); }, {c.field});
  }
}

}  // namespace
}  // namespace dflash

namespace dflash {
namespace {

// TRAINING §13's collectives per GPU and step at full scale, and their time at the stated bus
// bandwidths (planner/communication_time.hpp): bytes exact, times = bus bytes / bandwidth.
TEST(CommunicationTime, FullScaleCollectivesPerStep) {
  const std::int64_t P = drafter_parameter_count(full_scale_request().config);
  const std::int64_t padded = (P + 1023) / 1024 * 1024;  // to a multiple of 8 x 128
  const TrainingPrecision p = TrainingPrecision::production();
  const std::vector<CollectiveTime> zero1 = step_communication(P, p, {.gpus = 8, .zero_stage = 1});
  ASSERT_EQ(zero1.size(), 2u);
  EXPECT_EQ(zero1[0].collective, "reduce_scatter gradients");
  EXPECT_EQ(zero1[0].bytes, 4 * padded);  // fp32 gradients
  EXPECT_EQ(zero1[0].bus_bytes, 4 * padded / 8 * 7);
  EXPECT_EQ(zero1[1].collective, "all_gather parameters");
  EXPECT_EQ(zero1[1].bytes, 2 * padded);  // bf16 working copy
  EXPECT_EQ(zero1[1].bus_bytes, 2 * padded / 8 * 7);
  EXPECT_DOUBLE_EQ(zero1[0].nvlink_seconds, double(4 * padded / 8 * 7) / 360e9);
  EXPECT_DOUBLE_EQ(zero1[0].inter_node_seconds, double(4 * padded / 8 * 7) / 50e9);
  const std::vector<CollectiveTime> zero0 = step_communication(P, p, {.gpus = 8, .zero_stage = 0});
  ASSERT_EQ(zero0.size(), 1u);
  EXPECT_EQ(zero0[0].bytes, 4 * P);
  EXPECT_EQ(zero0[0].bus_bytes, 2 * 7 * 4 * P / 8);  // all-reduce: twice the ring
  EXPECT_TRUE(step_communication(P, p, {.gpus = 1, .zero_stage = 1}).empty());
}

}  // namespace
}  // namespace dflash
