#include "planner/host_memory.hpp"

#include <algorithm>

#include "planner/checked_bytes.hpp"
#include "planner/parameter_memory.hpp"
#include "reference/frozen_weight_source.hpp"

namespace dflash {

std::int64_t HostMemoryPlan::fresh_start() const {
  return checked_sum(checked_sum(optimizer_part, part_upload), frozen_piece);
}

std::int64_t HostMemoryPlan::resumed_start() const {
  return std::max(checked_sum(checkpoint_slice, optimizer_part), fresh_start());
}

std::int64_t HostMemoryPlan::steps() const {
  return checked_sum(checked_sum(step_batch, upload_staging), sequence_tables);
}

std::int64_t HostMemoryPlan::checkpoint_write() const { return checked_sum(upload_staging, checkpoint_gather); }

std::int64_t HostMemoryPlan::rank_peak() const { return std::max(resumed_start(), steps()); }  // >= fresh_start

std::int64_t HostMemoryPlan::lead_peak() const { return std::max(rank_peak(), checkpoint_write()); }

std::int64_t HostMemoryPlan::node_peak() const {
  return checked_sum(checked_product({ranks_per_node - 1, rank_peak()}), lead_peak());
}

std::optional<HostMemoryPlan> plan_host_memory(const PlanRequest& r, std::int64_t gpus_per_node) {
  validate_plan_request(r);
  require_at_least(gpus_per_node, 1, "gpus_per_node");
  if (r.precision.trunk != TrunkMemoryModel::cuda) return std::nullopt;
  const DrafterConfig& c = r.config;
  const std::int64_t P = drafter_parameter_counts(c).trainable;
  const std::int64_t shard = elements_per_gpu(P, r.layout, /*sharded_by_zero1=*/true);  // s, padding included
  const std::int64_t owned = std::min(shard, P);                                        // o: rank 0's, the largest
  const std::int64_t S = r.context, H = c.hidden_size, KH = c.feature_width(), T = r.tokens;
  const std::int64_t N = T / c.block_size;
  const std::int64_t rank_sequences = checked_product({r.sequences, r.micro_steps});

  HostMemoryPlan h;
  h.optimizer_part = checked_product({3, shard, 8});
  h.checkpoint_slice = checked_product({3, owned, 8});
  h.part_upload = checked_product({3, owned, 4});
  h.frozen_piece = checked_product({std::min(kFrozenPieceElements, checked_product({c.vocab_size, H})), 8 + 2});
  h.step_batch = checked_product({rank_sequences, S, checked_sum(9, checked_product({KH + H, 2}))});
  h.upload_staging = checked_product({T, H, 2});
  h.sequence_tables = checked_sum(checked_sum(checked_product({N, 9}), checked_product({T, 41})),
                                  checked_product({rank_sequences, checked_sum(N, checked_product({T, 2}))}));
  h.checkpoint_gather = checked_product({2, P, 4});
  h.ranks_per_node = std::min(gpus_per_node, r.layout.gpus);
  return h;
}

}  // namespace dflash
