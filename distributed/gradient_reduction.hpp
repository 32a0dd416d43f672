// The sum over ranks of one step's gradients (TRAINING §13), bucket by bucket in the plan's buckets
// (planner/parallel_layout.hpp: GradientBuckets), each bucket issued as soon as the backward of the
// rank's last sequence has finished every element in it. ZeRO-0 all-reduces contiguous pieces of the
// flat vector into every rank's gradients; ZeRO-1 reduce-scatters G pieces at once (piece r from
// shard r) so that this rank's shard holds the sums (the rest keeps the rank's own partial sums,
// never read again). The padding is never stored: it reads as 0.
//
// Only the timing depends on the backward: every element is summed over the rank's sequences first
// (the accumulator), then over ranks by the same collective on the same bucket as when everything
// waited for the end of the backward, so the sums are bitwise the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "distributed/communicator.hpp"
#include "distributed/flat_parameters.hpp"
#include "reference/tensor.hpp"

namespace dflash {

// When each bucket is issued: one home for the schedule, which the reference (GradientReduction)
// and the CUDA step (cuda_train_step.cpp) both follow.
//
// The backward announces, in this order, the canonical position from which every parameter
// gradient is final: first_layer_parameter(L) (norm.weight), first_layer_parameter(L - 1), ...,
// first_layer_parameter(0), then 0 (hidden_norm and fc): gradients_final_positions(L).
std::vector<std::size_t> gradients_final_positions(std::int64_t layers);

// Flat elements [final_from, P) are final and buckets next + 1 .. count - 1 were issued: issues
// (calls issue(k)) every bucket whose earliest element, first(k) (in shard 0 under ZeRO-1), is now
// final, last bucket first, and returns the next bucket still to issue (-1 when all were).
template <class Issue>
std::int64_t issue_complete_buckets(const GradientBuckets& buckets, std::int64_t final_from, std::int64_t next,
                                    Issue issue) {
  while (next >= 0 && buckets.first(next) >= final_from) issue(next--);
  return next;
}

// The whole step's schedule: for each announcement of gradients_final_positions (same index), the
// buckets issued right after it, in issue order. Every bucket appears exactly once.
std::vector<std::vector<std::int64_t>> bucket_issue_schedule(const FlatLayout& layout, std::int64_t layers,
                                                             const GradientBuckets& buckets);

class GradientReduction {
 public:
  // `buckets` are the layout's (gradient_buckets), `bucket` holds one (bucket_elements; nothing is
  // communicated on one rank); `grads` is the rank's accumulator, summed over its sequences.
  GradientReduction(Communicator& comm, const FlatLayout& layout, const GradientBuckets& buckets,
                    DrafterParameters<double>& grads, Tensor<double>& bucket);

  // The backward of the rank's last sequence has finished the gradients of the tensors from
  // position `first` on (GradientsFinal, reference/drafter_trunk.hpp): the newly final elements are
  // checked for non-finite values before any sum over ranks touches them, then every bucket they
  // complete is issued, last bucket first.
  void gradients_final_from(std::size_t first);

  // The flat index of the rank's first non-finite gradient element (canonical order), or -1.
  std::int64_t first_non_finite() const { return first_non_finite_; }

 private:
  void reduce_bucket(std::int64_t k);

  Communicator& comm_;
  const FlatLayout& layout_;
  DrafterParameters<double>& grads_;
  Tensor<double>& bucket_;
  GradientBuckets buckets_;
  std::int64_t final_from_;  // flat elements [final_from_, P) are final
  std::int64_t next_;        // the next bucket to issue (they go count - 1 down to 0), -1 when done
  std::int64_t first_non_finite_ = -1;
};

}  // namespace dflash
