#include "planner/parallel_layout.hpp"

#include "planner/checked_bytes.hpp"
#include "reference/errors.hpp"

namespace dflash {

void validate_parallel_layout(const ParallelLayout& l) {
  require_at_least(l.gpus, 1, "gpus");
  if (l.zero_stage != 0 && l.zero_stage != 1) throw_input_error("zero", str(l.zero_stage, " is not 0 or 1"));
  require_at_least(l.bucket_bytes, 1, "bucket_bytes");
  require_at_least(l.buckets_in_flight, 1, "buckets_in_flight");
}

std::int64_t elements_per_gpu(std::int64_t count, const ParallelLayout& layout, bool sharded_by_zero1) {
  return sharded_by_zero1 && layout.zero_stage >= 1 ? ceil_div(count, layout.gpus) : count;
}

std::int64_t communication_bytes(const ParallelLayout& layout) {
  return layout.gpus > 1 ? checked_product({layout.buckets_in_flight, layout.bucket_bytes}) : 0;
}

}  // namespace dflash
