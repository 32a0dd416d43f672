#include "planner/parameter_memory.hpp"

#include <algorithm>

#include "planner/checked_bytes.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

ParameterCounts drafter_parameter_counts(const DrafterConfig& config) {
  std::int64_t vectors = 0;  // what the CUDA step uploads in fp32: every parameter that is not a matrix
  for (const ParameterShape& s : drafter_parameter_shapes(config)) {
    if (s.shape.size() != 2) vectors = checked_sum(vectors, shape_numel(s.shape));
  }
  return {drafter_parameter_count(config), checked_product({2, config.vocab_size, config.hidden_size}), vectors};
}

CategoryBytes parameter_memory(const ParameterCounts& n, const TrainingPrecision& p, const ParallelLayout& layout) {
  validate_training_precision(p);
  validate_parallel_layout(layout);
  // in_place_flat keeps only the shard's part below P (rank 0's is the largest).
  const std::int64_t shard = elements_per_gpu(n.trainable, layout, /*sharded_by_zero1=*/true);
  const std::int64_t sharded = layout.in_place_flat ? std::min(shard, n.trainable) : shard;
  CategoryBytes m;
  m[PlanCategory::parameters] = checked_product({n.trainable, p.parameter_bytes});
  m[PlanCategory::frozen] = checked_product({n.frozen, p.frozen_bytes});
  m[PlanCategory::master_weights] = checked_product({sharded, p.master_bytes});
  const std::int64_t gradient_elements = layout.in_place_flat ? padded_count(n.trainable, layout) : n.trainable;
  m[PlanCategory::gradients] = checked_product({gradient_elements, p.gradient_bytes});
  m[PlanCategory::optimizer_state] = checked_product({sharded, p.optimizer_state_bytes});
  m[PlanCategory::communication] = communication_bytes(layout, n.trainable, p.gradient_bytes);
  return m;
}

}  // namespace dflash
