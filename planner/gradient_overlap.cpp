#include "planner/gradient_overlap.hpp"

#include <algorithm>
#include <vector>

#include "io/errors.hpp"
#include "planner/checked_bytes.hpp"
#include "planner/communication_time.hpp"
#include "reference/drafter_parameters.hpp"
#include "reference/drafter_trunk.hpp"

namespace dflash {

double exposed_seconds(std::span<const double> ready, std::span<const double> duration, double window_end) {
  if (ready.size() != duration.size()) {
    throw_input_error("collective times", str(ready.size(), " ready times for ", duration.size(), " durations"));
  }
  double end = 0;
  for (std::size_t i = 0; i < ready.size(); ++i) end = std::max(end, ready[i]) + duration[i];
  return std::max(0.0, end - window_end);
}

namespace {

// The FLOPs of the window's backward done when each tensor (drafter_parameter_shapes order) is
// final: norm.weight at 0, layer l's tensors at the end of its phase, fc and hidden_norm at the end.
// Returns the window's FLOPs.
double tensor_final_flops(const PlanRequest& r, const TrunkFlops& flops, std::vector<double>& final_at) {
  const std::int64_t L = r.config.num_hidden_layers;
  const std::int64_t segment = trunk_segment_length(r.trunk_policy, r.checkpoint_every, L);
  std::vector<double> layer_end(static_cast<std::size_t>(L));
  double done = 0;
  for (std::int64_t start = (L - 1) / segment * segment; start >= 0; start -= segment) {
    const std::int64_t end = std::min(start + segment, L);
    if (r.trunk_policy != TrunkPolicy::none) {  // the segment is rebuilt before its last layer's backward
      for (std::int64_t j = start; j < end; ++j) done += flops.layers[std::size_t(j)].forward;
    }
    for (std::int64_t l = end - 1; l >= start; --l) {
      done += flops.layers[std::size_t(l)].backward;
      layer_end[std::size_t(l)] = done;
    }
  }
  const double window = done + flops.context.backward;
  final_at.assign(first_layer_parameter(L) + 1, window);
  for (std::int64_t l = 0; l < L; ++l) {
    for (std::size_t i = 0; i < kParametersPerLayer; ++i)
      final_at[first_layer_parameter(l) + i] = layer_end[std::size_t(l)];
  }
  final_at[first_layer_parameter(L)] = 0;
  return window;
}

}  // namespace

GradientOverlap gradient_overlap(const PlanRequest& r) {
  validate_plan_request(r);
  const ParallelLayout& layout = r.layout;
  GradientOverlap o;
  if (layout.gpus <= 1) return o;
  std::vector<double> final_at;
  o.window_flops = tensor_final_flops(r, trunk_flops(r.config, r.tokens, r.context), final_at);
  o.window_seconds = o.window_flops / kAchievedFlopsPerSecond;
  o.step_backward_seconds = o.window_seconds * double(r.sequences * r.micro_steps);

  // Where each tensor starts in the flat vector, to find the tensor of a bucket's first element.
  std::vector<std::int64_t> offsets;
  std::int64_t count = 0;
  for (const ParameterShape& s : drafter_parameter_shapes(r.config)) {
    offsets.push_back(count);
    count = checked_sum(count, shape_numel(s.shape));
  }
  const std::int64_t G = layout.gpus, bytes = r.precision.gradient_bytes;
  const GradientBuckets buckets = gradient_buckets(count, layout, bytes);
  if (buckets.count() > kMaxPlannedBuckets) {
    throw_input_error("bucket_bytes", str(layout.bucket_bytes, " cuts the ", count, " gradients into ", buckets.count(),
                                          " buckets, more than the ", kMaxPlannedBuckets,
                                          " a plan times; check the model sizes or raise bucket_bytes"));
  }
  o.buckets = buckets.count();
  std::vector<double> ready, nvlink, inter_node;
  for (std::int64_t k = buckets.count() - 1; k >= 0; --k) {
    const std::int64_t e = buckets.first(k);
    const auto tensor =
        static_cast<std::size_t>(std::upper_bound(offsets.begin(), offsets.end(), e) - offsets.begin()) - 1;
    ready.push_back(e >= count ? 0.0 : final_at[tensor] / kAchievedFlopsPerSecond);  // padding alone: at once
    const CollectiveTime t = layout.zero_stage == 0
                                 ? ring_collective("all_reduce", buckets.elements(k) * bytes, 2, G)
                                 : ring_collective("reduce_scatter", G * buckets.elements(k) * bytes, 1, G);
    nvlink.push_back(t.nvlink_seconds);
    inter_node.push_back(t.inter_node_seconds);
  }
  const std::vector<CollectiveTime> step = step_communication(count, r.precision, layout);
  auto link = [&](const std::vector<double>& duration, double CollectiveTime::*seconds) {
    LinkOverlap l;
    for (double d : duration) l.gradient_seconds += d;
    l.exposed_seconds = exposed_seconds(ready, duration, o.window_seconds);
    if (layout.zero_stage == 1) l.after_backward_seconds = step.back().*seconds;
    l.fits_in_backward = l.gradient_seconds <= o.window_seconds;
    return l;
  };
  o.nvlink = link(nvlink, &CollectiveTime::nvlink_seconds);
  o.inter_node = link(inter_node, &CollectiveTime::inter_node_seconds);
  return o;
}

}  // namespace dflash
