#include "distributed/device_training_layout.hpp"

#include <algorithm>

#include "io/errors.hpp"

namespace dflash {

FlatRange owned_range(const FlatLayout& layout, int rank) {
  if (rank < 0 || rank >= layout.ranks()) throw_input_error("rank", str(rank, " is outside [0, ", layout.ranks(), ")"));
  const std::int64_t P = layout.count(), begin = layout.shard_offset(rank);
  return {std::min(begin, P), std::min(begin + layout.shard_size(), P)};
}

HostDecayTable decay_table(const FlatLayout& layout) {
  HostDecayTable table;
  for (const FlatTensor& t : layout.tensors()) {
    table.ends.push_back(t.offset + t.numel);
    table.decay.push_back(t.decay ? 1 : 0);
  }
  return table;
}

WorkingLayout working_layout(const FlatLayout& layout) {
  WorkingLayout w;
  for (const FlatTensor& t : layout.tensors()) {
    const bool matrix = t.shape.size() == 2;
    std::int64_t& filled = matrix ? w.matrix_elements : w.vector_elements;
    w.slots.push_back({matrix, filled});
    filled += t.numel;
  }
  return w;
}

std::vector<WorkingCopyRun> working_copy_runs(const FlatLayout& layout, const WorkingLayout& working,
                                              std::int64_t begin, std::int64_t n) {
  std::vector<WorkingCopyRun> runs;
  for (const FlatRun& r : flat_runs(layout, begin, n)) {
    const WorkingSlot& slot = working.slots.at(r.tensor);
    runs.push_back({slot.matrix, r.position, slot.offset + r.at, r.length});
  }
  return runs;
}

namespace {

void require_part_size(const Tensor<double>& t, const FlatLayout& layout, const char* what) {
  if (t.numel() != layout.shard_size()) {
    throw_input_error(what, str(t.numel(), " values for a shard of ", layout.shard_size()));
  }
}

std::vector<float> owned_floats(const Tensor<double>& shard, const FlatRange& owned, std::int64_t offset) {
  std::vector<float> out(static_cast<std::size_t>(owned.size()));
  for (std::int64_t e = owned.begin; e < owned.end; ++e) out[std::size_t(e - owned.begin)] = float(shard[e - offset]);
  return out;
}

void put_owned(const std::vector<float>& part, const FlatRange& owned, std::int64_t offset, Tensor<double>& shard,
               const char* what) {
  if (static_cast<std::int64_t>(part.size()) != owned.size()) {
    throw_input_error(what, str(part.size(), " values, but the rank owns ", owned.size(), " (flat [", owned.begin, ", ",
                                owned.end, "))"));
  }
  for (std::int64_t e = owned.begin; e < owned.end; ++e) shard[e - offset] = double(part[std::size_t(e - owned.begin)]);
}

}  // namespace

DeviceOptimizerPart device_optimizer_part(const FlatLayout& layout, int rank, const OptimizerState& state) {
  const FlatRange owned = owned_range(layout, rank);
  if (state.offset != layout.shard_offset(rank)) {
    throw_input_error("optimizer state", str("starts at flat element ", state.offset, "; rank ", rank,
                                             "'s shard starts at ", layout.shard_offset(rank)));
  }
  require_part_size(state.master, layout, "master weights");
  require_part_size(state.exp_avg, layout, "exp_avg");
  require_part_size(state.exp_avg_sq, layout, "exp_avg_sq");
  return {state.step, owned_floats(state.master, owned, state.offset), owned_floats(state.exp_avg, owned, state.offset),
          owned_floats(state.exp_avg_sq, owned, state.offset)};
}

OptimizerState host_optimizer_state(MemoryTracker& tracker, const FlatLayout& layout, int rank,
                                    const DeviceOptimizerPart& part) {
  const FlatRange owned = owned_range(layout, rank);
  const std::vector<double> zeros(static_cast<std::size_t>(layout.count()), 0.0);
  OptimizerState s = restore_optimizer_state(tracker, layout, rank, zeros, zeros, zeros, part.step);
  put_owned(part.master, owned, s.offset, s.master, "master weights");
  put_owned(part.exp_avg, owned, s.offset, s.exp_avg, "exp_avg");
  put_owned(part.exp_avg_sq, owned, s.offset, s.exp_avg_sq, "exp_avg_sq");
  return s;
}

}  // namespace dflash
