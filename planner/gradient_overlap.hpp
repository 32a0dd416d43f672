// Whether a step's gradient reduction hides behind its backward (issue 12), per GPU, at the two bus
// bandwidths of communication_time.hpp and a stated compute rate.
//
// A bucket can only be summed over GPUs once the last sequence of the step on that GPU has finished
// it (distributed/gradient_reduction.hpp). So the reduction hides behind that sequence's trunk
// backward, the window, and behind nothing else: not its loss head's backward (no parameter
// gradient is final yet) and not the earlier sequences or micro-steps. The buckets
// (GradientBuckets, planner/parallel_layout.hpp) go last bucket first, one at a time. Bucket k is
// ready when the backward has finished its first flat element: norm.weight at once, layer l at the
// end of its backward (with its recomputation under per_layer / every_k), fc and hidden_norm at the
// end of the window. It starts when it is ready and the bucket before it is done. The exposed time
// is how long the last one ends after the window. ZeRO-1's all-gather of the updated parameters
// comes after the optimizer step, so nothing hides it: it is reported apart, all exposed.
//
// Under ZeRO-1 every bucket holds a piece of shard 0, the front of the flat vector (fc, the first
// layer), so no bucket is ready before the first layer's backward is done: the reduce-scatter is
// nearly all exposed, whatever the bandwidth. ZeRO-0's all-reduce buckets are contiguous and
// follow the backward layer by layer. Only fc's buckets (fc is finished last) cannot hide.
#pragma once

#include <cstdint>
#include <span>

#include "planner/training_plan.hpp"
#include "planner/trunk_flops.hpp"

namespace dflash {

// The stated compute rate. H200 SXM (as H100 SXM): 989.4 TFLOP/s dense bf16 on the tensor cores
// (no sparsity). Large cuBLAS GEMMs reach 60-70 % of it. Elementwise kernels, attention (>= 30 % of
// peak is the target, DESIGN-NOTES) and launch gaps bring a whole backward to about half, the figure
// used here. bench/ measures the real one.
inline constexpr double kH200DenseBf16FlopsPerSecond = 989.4e12;
inline constexpr double kAchievedFractionOfPeak = 0.5;
inline constexpr double kAchievedFlopsPerSecond = kH200DenseBf16FlopsPerSecond * kAchievedFractionOfPeak;

// Collectives issued in this order, one at a time: collective i is ready at ready[i] and takes
// duration[i] (seconds from the start of the window). How long the last one ends after
// window_end; 0 when it ends before. Throws InputError when the spans differ in length.
double exposed_seconds(std::span<const double> ready, std::span<const double> duration, double window_end);

// The most buckets the overlap is worked out for, one by one: a million buckets is 25 TB of fp32
// gradients at the default 25 MiB, ~10^4 times the largest model TRAINING plans. A plan past it
// (an absurd hidden_size, a tiny bucket_bytes) is refused in milliseconds instead of timing
// billions of buckets (hidden_size 2^40 used to take 1.3 GB and 6 s).
inline constexpr std::int64_t kMaxPlannedBuckets = std::int64_t(1) << 20;

struct LinkOverlap {
  double gradient_seconds = 0;        // the bucketed reduce-scatter (ZeRO-1) or all-reduce (ZeRO-0)
  double exposed_seconds = 0;         // what of it ends after the window
  double after_backward_seconds = 0;  // ZeRO-1's all-gather, after the optimizer step: all exposed
  bool fits_in_backward = false;      // gradient_seconds <= the window: enough backward to hide behind
};

struct GradientOverlap {
  double window_flops = 0;           // the last sequence's trunk backward (recomputation included)
  double window_seconds = 0;         // at kAchievedFlopsPerSecond
  double step_backward_seconds = 0;  // every sequence's trunk backward of the step on one GPU
  std::int64_t buckets = 0;
  LinkOverlap nvlink, inter_node;
};

// Nothing to overlap on one GPU (all zero).
GradientOverlap gradient_overlap(const PlanRequest& request);

}  // namespace dflash
