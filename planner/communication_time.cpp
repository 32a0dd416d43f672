#include "planner/communication_time.hpp"

#include "planner/checked_bytes.hpp"

namespace dflash {

CollectiveTime ring_collective(std::string name, std::int64_t bytes, std::int64_t passes, std::int64_t gpus) {
  // passes x (G - 1)/G of the buffer, in bytes (exact: the padded buffers are multiples of G).
  const std::int64_t bus = checked_product({passes, gpus - 1, bytes}) / gpus;
  return {std::move(name), bytes, bus, double(bus) / kNvlinkBusBytesPerSecond,
          double(bus) / kInterNodeBusBytesPerSecond};
}

std::vector<CollectiveTime> step_communication(std::int64_t trainable, const TrainingPrecision& p,
                                               const ParallelLayout& layout) {
  validate_parallel_layout(layout);
  if (layout.gpus <= 1) return {};
  const std::int64_t G = layout.gpus;
  if (layout.zero_stage == 0) {
    return {ring_collective("all_reduce gradients", checked_product({trainable, p.gradient_bytes}), 2, G)};
  }
  const std::int64_t padded = padded_count(trainable, layout);
  return {ring_collective("reduce_scatter gradients", checked_product({padded, p.gradient_bytes}), 1, G),
          ring_collective("all_gather parameters", checked_product({padded, p.parameter_bytes}), 1, G)};
}

}  // namespace dflash
