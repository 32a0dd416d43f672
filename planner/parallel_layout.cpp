#include "planner/parallel_layout.hpp"

#include <algorithm>

#include "io/errors.hpp"
#include "planner/checked_bytes.hpp"

namespace dflash {

void validate_parallel_layout(const ParallelLayout& l) {
  require_at_least(l.gpus, 1, "gpus");
  if (l.zero_stage != 0 && l.zero_stage != 1) throw_input_error("zero", str(l.zero_stage, " is not 0 or 1"));
  require_at_least(l.bucket_bytes, 1, "bucket_bytes");
  require_at_least(l.buckets_in_flight, 1, "buckets_in_flight");
}

std::int64_t padded_count(std::int64_t count, const ParallelLayout& layout) {
  if (layout.zero_stage < 1) return count;
  const std::int64_t unit = checked_product({layout.gpus, kZeroShardAlignment});
  return checked_product({ceil_div(count, unit), unit});
}

std::int64_t elements_per_gpu(std::int64_t count, const ParallelLayout& layout, bool sharded_by_zero1) {
  return sharded_by_zero1 && layout.zero_stage >= 1 ? padded_count(count, layout) / layout.gpus : count;
}

std::int64_t bucket_elements(std::int64_t count, const ParallelLayout& layout, std::int64_t element_bytes) {
  require_at_least(element_bytes, 1, "bucket element bytes");
  const std::int64_t fit = layout.bucket_bytes / element_bytes;
  if (layout.zero_stage < 1) return std::max<std::int64_t>(1, std::min(count, fit));
  const std::int64_t piece =
      std::min(elements_per_gpu(count, layout, true), std::max<std::int64_t>(1, fit / layout.gpus));
  return checked_product({layout.gpus, piece});
}

GradientBuckets gradient_buckets(std::int64_t count, const ParallelLayout& layout, std::int64_t element_bytes) {
  const std::int64_t elements = bucket_elements(count, layout, element_bytes);
  if (layout.zero_stage < 1) return {elements, count};
  return {elements / layout.gpus, elements_per_gpu(count, layout, true)};
}

std::int64_t communication_bytes(const ParallelLayout& layout, std::int64_t count, std::int64_t element_bytes) {
  if (layout.gpus <= 1 || layout.in_place_flat) return 0;
  return checked_product({layout.buckets_in_flight, bucket_elements(count, layout, element_bytes), element_bytes});
}

}  // namespace dflash
