#include "distributed/optimizer_state.hpp"

#include <algorithm>

#include "io/errors.hpp"

namespace dflash {

namespace {

OptimizerState empty_state(MemoryTracker& tracker, const FlatLayout& layout, int rank) {
  if (rank < 0 || rank >= layout.ranks()) throw_input_error("rank", str(rank, " is outside [0, ", layout.ranks(), ")"));
  const Shape shard{layout.shard_size()};
  return OptimizerState{0, layout.shard_offset(rank), Tensor<double>(tracker, MemoryCategory::optimizer, shard),
                        Tensor<double>(tracker, MemoryCategory::optimizer, shard),
                        Tensor<double>(tracker, MemoryCategory::optimizer, shard)};
}

// This rank's part (from flat element `offset`, 0 in the padding) of the values [first, first +
// size) of a flat vector of P = count values, which must hold all of the part's.
void take_part(std::span<const double> values, std::int64_t first, std::int64_t offset, Tensor<double>& part,
               std::string_view what, std::int64_t count) {
  const auto size = static_cast<std::int64_t>(values.size());
  const std::int64_t needed_end = std::min(offset + part.numel(), count);
  if (first < 0 || first + size > count || (needed_end > offset && (first > offset || first + size < needed_end))) {
    throw_input_error(what, str(size, " values from flat element ", first, " for the part [", offset, ", ", needed_end,
                                ") of ", count, " parameters"));
  }
  for (std::int64_t i = 0; i < part.numel(); ++i) {
    const std::int64_t e = offset + i;
    part[i] = e < count ? values[static_cast<std::size_t>(e - first)] : 0.0;
  }
}

}  // namespace

OptimizerState make_optimizer_state(MemoryTracker& tracker, const FlatLayout& layout, int rank,
                                    const DrafterParameters<double>& params) {
  return make_optimizer_state(
      tracker, layout, rank, [&](std::int64_t first, std::span<double> out) { read_flat(layout, params, first, out); });
}

OptimizerState make_optimizer_state(MemoryTracker& tracker, const FlatLayout& layout, int rank,
                                    const std::function<void(std::int64_t first, std::span<double> out)>& flat_values) {
  OptimizerState s = empty_state(tracker, layout, rank);
  flat_values(s.offset, {s.master.data(), static_cast<std::size_t>(s.master.numel())});
  return s;
}

OptimizerState restore_optimizer_state(MemoryTracker& tracker, const FlatLayout& layout, int rank,
                                       std::span<const double> master, std::span<const double> exp_avg,
                                       std::span<const double> exp_avg_sq, std::int64_t step) {
  for (const auto& [values, what] :
       {std::pair{master, "master weights"}, std::pair{exp_avg, "exp_avg"}, std::pair{exp_avg_sq, "exp_avg_sq"}}) {
    if (static_cast<std::int64_t>(values.size()) != layout.count()) {
      throw_input_error(what, str(values.size(), " values for ", layout.count(), " parameters"));
    }
  }
  return restore_optimizer_part(tracker, layout, rank, 0, master, exp_avg, exp_avg_sq, step);
}

OptimizerState restore_optimizer_part(MemoryTracker& tracker, const FlatLayout& layout, int rank, std::int64_t first,
                                      std::span<const double> master, std::span<const double> exp_avg,
                                      std::span<const double> exp_avg_sq, std::int64_t step) {
  if (step < 0) throw_input_error("optimizer step", str(step, " is negative"));
  OptimizerState s = empty_state(tracker, layout, rank);
  s.step = step;
  take_part(master, first, s.offset, s.master, "master weights", layout.count());
  take_part(exp_avg, first, s.offset, s.exp_avg, "exp_avg", layout.count());
  take_part(exp_avg_sq, first, s.offset, s.exp_avg_sq, "exp_avg_sq", layout.count());
  return s;
}

std::vector<double> gather_full(Communicator& comm, const FlatLayout& layout, const Tensor<double>& part) {
  if (part.numel() != layout.shard_size()) {
    throw_input_error("optimizer part", str(part.numel(), " values for a shard of ", layout.shard_size()));
  }
  if (layout.zero_stage() == 0) return part.values();
  std::vector<double> all(static_cast<std::size_t>(layout.padded()));
  comm.all_gather(part.data(), all.data(), static_cast<std::size_t>(part.numel()), CommType::f64);
  all.resize(static_cast<std::size_t>(layout.count()));
  return all;
}

}  // namespace dflash
