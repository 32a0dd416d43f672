#include "distributed/gradient_reduction.hpp"

#include <cmath>
#include <utility>
#include <vector>

#include "reference/drafter_trunk.hpp"

namespace dflash {

std::vector<std::size_t> gradients_final_positions(std::int64_t layers) {
  std::vector<std::size_t> positions;
  for (std::int64_t l = layers; l >= 0; --l) positions.push_back(first_layer_parameter(l));
  positions.push_back(0);
  return positions;
}

std::vector<std::vector<std::int64_t>> bucket_issue_schedule(const FlatLayout& layout, std::int64_t layers,
                                                             const GradientBuckets& buckets) {
  std::vector<std::vector<std::int64_t>> schedule;
  std::int64_t next = buckets.count() - 1;
  for (const std::size_t position : gradients_final_positions(layers)) {
    std::vector<std::int64_t>& issued = schedule.emplace_back();
    next = issue_complete_buckets(buckets, layout.tensors().at(position).offset, next,
                                  [&](std::int64_t k) { issued.push_back(k); });
  }
  return schedule;
}

GradientReduction::GradientReduction(Communicator& comm, const FlatLayout& layout, const GradientBuckets& buckets,
                                     DrafterParameters<double>& grads, Tensor<double>& bucket)
    : comm_(comm),
      layout_(layout),
      grads_(grads),
      bucket_(bucket),
      buckets_(buckets),
      final_from_(layout.count()),
      next_(comm.size() > 1 ? buckets_.count() - 1 : -1) {}

void GradientReduction::gradients_final_from(std::size_t first) {
  const std::int64_t from = layout_.tensors().at(first).offset;
  // The newly final elements, last to first: the lowest non-finite one seen is the first in canonical order.
  const std::vector<const Tensor<double>*> tensors = flat_tensors(std::as_const(grads_));
  for (std::size_t t = first; t < tensors.size(); ++t) {
    const FlatTensor& ft = layout_.tensors()[t];
    if (ft.offset >= final_from_) break;
    for (std::int64_t i = 0; i < ft.numel; ++i) {
      if (std::isfinite((*tensors[t])[i])) continue;
      if (first_non_finite_ < 0 || ft.offset + i < first_non_finite_) first_non_finite_ = ft.offset + i;
      break;
    }
  }
  if (from < final_from_) final_from_ = from;
  next_ = issue_complete_buckets(buckets_, final_from_, next_, [&](std::int64_t k) { reduce_bucket(k); });
}

void GradientReduction::reduce_bucket(std::int64_t k) {
  const std::int64_t at = buckets_.first(k), n = buckets_.elements(k);
  if (layout_.zero_stage() == 0) {
    const std::span<double> piece(bucket_.data(), static_cast<std::size_t>(n));
    read_flat(layout_, grads_, at, piece);
    comm_.all_reduce(piece.data(), piece.data(), piece.size(), CommType::f64, CommOp::sum);
    write_flat(layout_, grads_, at, piece);
    return;
  }
  const std::int64_t s = layout_.shard_size();
  for (int r = 0; r < comm_.size(); ++r) {
    read_flat(layout_, grads_, r * s + at, {bucket_.data() + r * n, static_cast<std::size_t>(n)});
  }
  double* own = bucket_.data() + comm_.rank() * n;
  comm_.reduce_scatter(bucket_.data(), own, static_cast<std::size_t>(n), CommType::f64, CommOp::sum);
  write_flat(layout_, grads_, layout_.shard_offset(comm_.rank()) + at, {own, static_cast<std::size_t>(n)});
}

}  // namespace dflash
