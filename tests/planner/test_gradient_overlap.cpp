// Whether the gradient reduction hides behind backward (planner/gradient_overlap.hpp): the exposed
// time of a queue of collectives on hand-computed cases, the trunk's FLOPs on a small config worked
// out by hand, and the full-scale numbers (printed) against the model's own terms.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <vector>

#include <gtest/gtest.h>

#include "planner/communication_time.hpp"
#include "planner/gradient_overlap.hpp"
#include "reference/drafter_parameters.hpp"
#include "reference/drafter_trunk.hpp"
#include "tests/planner/expect_input_error.hpp"
#include "tests/planner/source_configs.hpp"

namespace dflash {
namespace {

double exposed(std::vector<double> ready, std::vector<double> duration, double window_end) {
  return exposed_seconds(ready, duration, window_end);
}

// Four buckets ready at 1, 2, 3, 4 s of a 4 s backward.
TEST(ExposedSeconds, OnlyTheLastBucketShowsWhenCommunicationKeepsUp) {
  EXPECT_DOUBLE_EQ(exposed({1, 2, 3, 4}, {0.5, 0.5, 0.5, 0.5}, 4), 0.5);  // each done before the next is ready
}

TEST(ExposedSeconds, SlowCommunicationQueuesUp) {
  // Busy from 1 s on: ends at 3, 5, 7, 9; the backward ended at 4.
  EXPECT_DOUBLE_EQ(exposed({1, 2, 3, 4}, {2, 2, 2, 2}, 4), 5.0);
}

TEST(ExposedSeconds, BucketsReadyOnlyAtTheEndAreAllExposed) {
  EXPECT_DOUBLE_EQ(exposed({4, 4, 4}, {0.5, 0.25, 1}, 4), 1.75);
}

TEST(ExposedSeconds, CommunicationEndingBeforeTheBackwardIsHidden) {
  EXPECT_DOUBLE_EQ(exposed({0, 1}, {0.5, 1}, 4), 0.0);
  EXPECT_DOUBLE_EQ(exposed({}, {}, 4), 0.0);
}

TEST(ExposedSeconds, ReadyAndDurationsOfDifferentLengthsAreRefused) {
  expect_input_error([] { exposed({1, 2}, {1}, 4); }, {"collective times", "2 ready times for 1 durations"});
}

// configs/tiny.json: H 16, I 32, nh 4, nkv 2, d 4, B 4, K 2, a sliding layer (window 6) then a full
// one; T 8 block tokens, S 12 context rows.
TEST(TrunkFlops, TinyConfigByHand) {
  const DrafterConfig c = load_drafter_config(source_dir() / "configs/tiny.json");
  const TrunkFlops f = trunk_flops(c, 8, 12);
  // Linears on block tokens: 2 x 8 x (16x16 + 2x16x8 + 16x16 + 3x16x32) = 36864; context k, v: 2 x 12 x 2x16x8 = 6144.
  // Attention, 4 x 8 x (4x4) x keys: sliding sees 4 + (6 - 36/24) = 8.5 keys (4352); full 4 + 12/2 = 10 (5120).
  ASSERT_EQ(f.layers.size(), 2u);
  EXPECT_DOUBLE_EQ(f.layers[0].forward, 36864 + 6144 + 4352);
  EXPECT_DOUBLE_EQ(f.layers[1].forward, 36864 + 6144 + 5120);
  EXPECT_DOUBLE_EQ(f.layers[1].backward, 2 * (36864 + 6144 + 5120));
  EXPECT_DOUBLE_EQ(f.context.forward, 2 * 12 * 32 * 16);   // F [12, 32] W_fc^T [32, 16]
  EXPECT_DOUBLE_EQ(f.context.backward, 2 * 12 * 32 * 16);  // dW_fc only
  EXPECT_DOUBLE_EQ(f.backward(), 2 * (47360 + 48128) + 12288);
}

PlanRequest full_scale(int zero) {
  PlanRequest r = full_scale_request();
  r.layout.zero_stage = zero;
  return r;
}

// DESIGN-NOTES: the trunk's linears are 6 x 1.60e9 x 32768 = 3.1e14 FLOPs forward and backward, the
// context path about 0.05e14 and attention about 2e13, so a forward is a third of about 3.35e14.
TEST(TrunkFlops, FullScaleAgreesWithTheDesignNotes) {
  const PlanRequest r = full_scale(1);
  const TrunkFlops f = trunk_flops(r.config, r.tokens, r.context);
  const double fwd_bwd = f.forward() + f.backward();
  EXPECT_GT(fwd_bwd, 3.1e14 + 0.02e14);
  EXPECT_LT(fwd_bwd, 3.1e14 + 0.05e14 + 2.2e13);
}

// The window at full scale: per_layer rebuilds each layer before its backward, so the window is
// every layer's forward and backward plus dW_fc. Communication is far faster than backward, so the
// buckets of layers L-1 ... 1 are done before layer 0's backward ends. The buckets that start in
// layer 0 go then, and overlap only dW_fc. Those that start in fc or hidden_norm go at the end:
// exposed = max(0, layer-0 buckets - dW_fc time) + fc buckets. Under ZeRO-1 every bucket starts in
// shard 0, which ends inside layer 0, so there are no others.
TEST(GradientOverlap, FullScaleNumbers) {
  for (int zero : {0, 1}) {
    const PlanRequest r = full_scale(zero);
    const GradientOverlap o = gradient_overlap(r);
    const TrunkFlops f = trunk_flops(r.config, r.tokens, r.context);
    EXPECT_DOUBLE_EQ(o.window_flops, f.forward() - f.context.forward + f.backward());
    EXPECT_DOUBLE_EQ(o.window_seconds, o.window_flops / kAchievedFlopsPerSecond);
    EXPECT_DOUBLE_EQ(o.step_backward_seconds, o.window_seconds);  // one sequence, one micro-step

    const std::int64_t P = drafter_parameter_count(r.config);
    const std::vector<ParameterShape> shapes = drafter_parameter_shapes(r.config);
    std::vector<std::int64_t> offset{0};
    for (const ParameterShape& s : shapes) offset.push_back(offset.back() + shape_numel(s.shape));
    const std::int64_t layer0 = offset[first_layer_parameter(0)], layer1 = offset[first_layer_parameter(1)];
    const GradientBuckets b = gradient_buckets(P, r.layout, 4);
    double at_end = 0, in_layer0 = 0, others = 0, total = 0;  // NVLink seconds by where a bucket starts
    for (std::int64_t k = 0; k < b.count(); ++k) {
      const double s = zero == 0 ? ring_collective("", 4 * b.elements(k), 2, 8).nvlink_seconds
                                 : ring_collective("", 8 * 4 * b.elements(k), 1, 8).nvlink_seconds;
      total += s;
      (b.first(k) < layer0 ? at_end : b.first(k) < layer1 ? in_layer0 : others) += s;
    }
    EXPECT_EQ(others > 0, zero == 0);
    EXPECT_DOUBLE_EQ(o.nvlink.gradient_seconds, total);
    EXPECT_NEAR(o.nvlink.gradient_seconds, step_communication(P, r.precision, r.layout).front().nvlink_seconds, 1e-9);
    const double fc_seconds = f.context.backward / kAchievedFlopsPerSecond;
    EXPECT_NEAR(o.nvlink.exposed_seconds, std::max(0.0, in_layer0 - fc_seconds) + at_end, 1e-12);
    EXPECT_DOUBLE_EQ(o.nvlink.after_backward_seconds,
                     zero == 0 ? 0.0 : step_communication(P, r.precision, r.layout).back().nvlink_seconds);
    EXPECT_TRUE(o.nvlink.fits_in_backward);
    EXPECT_GT(o.inter_node.exposed_seconds, o.nvlink.exposed_seconds);
    std::cout << "full scale, 8 GPUs, ZeRO-" << zero << ": window " << o.window_flops << " FLOP = " << o.window_seconds
              << " s; " << o.buckets << " buckets; NVLink " << o.nvlink.gradient_seconds << " s, exposed "
              << o.nvlink.exposed_seconds << " s (+ all-gather " << o.nvlink.after_backward_seconds
              << " s); inter-node " << o.inter_node.gradient_seconds << " s, exposed " << o.inter_node.exposed_seconds
              << " s (+ all-gather " << o.inter_node.after_backward_seconds << " s)\n";
  }
}

// Issue 22, class 5: a plan at an absurd size (here hidden_size 2^22 with one target layer: fc alone is
// 2^44 gradients, 2.7 million buckets of 25 MiB) built one vector entry per bucket (hidden_size 2^40:
// 1.3 GB, 6 s; 2^41: bad_alloc). It is refused, naming bucket_bytes and the count.
TEST(GradientOverlap, AbsurdBucketCountIsRefused) {
  PlanRequest r = full_scale(0);
  r.config.hidden_size = std::int64_t(1) << 22;
  r.config.intermediate_size = 16;
  r.config.target_layer_ids = {1};
  const std::int64_t P = drafter_parameter_count(r.config);
  const std::int64_t count = gradient_buckets(P, r.layout, r.precision.gradient_bytes).count();
  ASSERT_GT(count, kMaxPlannedBuckets);
  expect_input_error([&] { gradient_overlap(r); }, {"bucket_bytes", std::to_string(count), "buckets"});
}

TEST(GradientOverlap, OneGpuHasNothingToHide) {
  PlanRequest r = full_scale(1);
  r.layout.gpus = 1;
  const GradientOverlap o = gradient_overlap(r);
  EXPECT_EQ(o.buckets, 0);
  EXPECT_EQ(o.nvlink.gradient_seconds, 0);
  EXPECT_EQ(o.inter_node.exposed_seconds, 0);
}

// Recomputation lengthens the window by one forward of every layer, whatever the segment length:
// per_layer rebuilds each layer, every_k each segment of k (5 layers, k = 2: segments 2, 2, 1).
TEST(GradientOverlap, EveryRecomputingPolicyRebuildsEveryLayerOnce) {
  PlanRequest r = full_scale(0);
  ASSERT_EQ(r.config.num_hidden_layers, 5);
  r.trunk_policy = TrunkPolicy::none;
  const double none = gradient_overlap(r).window_flops;
  const TrunkFlops f = trunk_flops(r.config, r.tokens, r.context);
  double forward_of_layers = 0;
  for (const auto& layer : f.layers) forward_of_layers += layer.forward;
  for (const auto& [policy, k] : {std::pair{TrunkPolicy::per_layer, 1}, std::pair{TrunkPolicy::every_k, 2},
                                  std::pair{TrunkPolicy::every_k, 3}, std::pair{TrunkPolicy::every_k, 5}}) {
    r.trunk_policy = policy;
    r.checkpoint_every = k;
    EXPECT_DOUBLE_EQ(gradient_overlap(r).window_flops, none + forward_of_layers) << k;
  }
}

// More sequences or micro-steps lengthen the step's backward, not the window: only the last
// sequence's backward can hide the buckets.
TEST(GradientOverlap, OnlyTheLastSequenceHidesTheReduction) {
  PlanRequest r = full_scale(0);
  const GradientOverlap one = gradient_overlap(r);
  r.sequences = 2;
  r.micro_steps = 3;
  const GradientOverlap six = gradient_overlap(r);
  EXPECT_DOUBLE_EQ(six.window_seconds, one.window_seconds);
  EXPECT_DOUBLE_EQ(six.step_backward_seconds, 6 * one.window_seconds);
  EXPECT_DOUBLE_EQ(six.nvlink.exposed_seconds, one.nvlink.exposed_seconds);
}

}  // namespace
}  // namespace dflash
