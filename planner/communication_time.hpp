// The data-parallel communication of one training step per GPU (TRAINING §13), from the plan's
// parameter count, precision and layout, and its time at two stated bandwidths, so that a user can
// set it against the step's backward time (which overlaps the gradient reduction on the GPU path).
//   ZeRO-0  all-reduce of the gradients:            P x gradient_bytes
//   ZeRO-1  reduce-scatter of the padded gradients:  P' G x gradient_bytes   (P' G = P padded to G 128)
//           all-gather of the updated parameters:   P' G x parameter_bytes  (the working copy)
// A ring moves (G - 1)/G of the buffer per GPU for reduce-scatter and all-gather, twice that for
// all-reduce ("bus bytes", as nccl-tests counts them); time = bus bytes / bus bandwidth. The
// scalar all-reduces (W, metrics, the norm: a few bytes each) are latency, not bandwidth, and are
// left out. One GPU communicates nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/parallel_layout.hpp"
#include "planner/training_precision.hpp"

namespace dflash {

// Stated bandwidths (bus bandwidth per GPU, bytes/s):
// NVLink within a node: H100/H200 SXM have 900 GB/s of NVLink per GPU (450 GB/s each way); NCCL's
// large all-reduce reaches about 360 GB/s of bus bandwidth on 8 of them (nccl-tests), the figure
// used here.
inline constexpr double kNvlinkBusBytesPerSecond = 360e9;
// Between nodes: one 400 Gb/s InfiniBand NDR port per GPU, 50 GB/s, the usual H100/H200 cluster.
inline constexpr double kInterNodeBusBytesPerSecond = 50e9;

struct CollectiveTime {
  std::string collective;      // "all_reduce gradients", ...
  std::int64_t bytes = 0;      // the buffer each GPU contributes
  std::int64_t bus_bytes = 0;  // what each GPU sends in a ring
  double nvlink_seconds = 0;
  double inter_node_seconds = 0;
};

// A ring collective on a buffer of `bytes` per GPU: passes x (G - 1)/G of it in bus bytes (1 pass for
// reduce-scatter and all-gather, 2 for all-reduce) and its time at both bandwidths.
CollectiveTime ring_collective(std::string name, std::int64_t bytes, std::int64_t passes, std::int64_t gpus);

std::vector<CollectiveTime> step_communication(std::int64_t trainable, const TrainingPrecision& precision,
                                               const ParallelLayout& layout);

}  // namespace dflash
