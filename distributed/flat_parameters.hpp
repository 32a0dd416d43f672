// The flat parameter vector of TRAINING §12: the trainable tensors in canonical order (fc,
// hidden_norm, each layer's eleven, norm; the order of drafter_parameter_shapes and
// DrafterParameters::for_each), each C-order, concatenated. ZeRO-1 (§13) pads it with zeros to a
// multiple of R 128 elements and gives rank r the contiguous shard [r s, (r + 1) s), s = padded / R;
// ZeRO-0 gives every rank the whole unpadded vector. The padding is never stored in the parameter
// or gradient tensors: it reads as 0 and writes are dropped.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "planner/parallel_layout.hpp"
#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

struct FlatTensor {
  std::string name;  // SPEC §3 name
  Shape shape;
  std::int64_t offset;  // first element in the flat vector
  std::int64_t numel;
  bool decay;  // weight decay applies: matrices only, never norm weights (§12)
};

class FlatLayout {
 public:
  FlatLayout(const DrafterConfig& config, int ranks, int zero_stage);

  const std::vector<FlatTensor>& tensors() const { return tensors_; }
  const std::vector<std::int64_t>& sizes() const { return sizes_; }  // tensors()[i].numel
  std::int64_t count() const { return count_; }                      // P
  std::int64_t padded() const { return padded_; }                    // ZeRO-1: P rounded up to R 128; ZeRO-0: P
  int ranks() const { return ranks_; }
  int zero_stage() const { return zero_stage_; }
  // The part of the flat vector rank r updates: [shard_offset(r), + shard_size()).
  std::int64_t shard_size() const { return zero_stage_ == 1 ? padded_ / ranks_ : count_; }
  std::int64_t shard_offset(int rank) const { return zero_stage_ == 1 ? std::int64_t(rank) * shard_size() : 0; }
  // Index of the tensor holding flat element e < P.
  std::size_t tensor_at(std::int64_t e) const;
  // The planner's view of this layout (bucket sizes, memory): R GPUs, this ZeRO stage.
  ParallelLayout parallel_layout(std::int64_t bucket_bytes, std::int64_t buckets_in_flight) const {
    return {.gpus = ranks_,
            .zero_stage = zero_stage_,
            .bucket_bytes = bucket_bytes,
            .buckets_in_flight = buckets_in_flight};
  }

 private:
  std::vector<FlatTensor> tensors_;
  std::vector<std::int64_t> sizes_;
  std::int64_t count_ = 0, padded_ = 0;
  int ranks_ = 1, zero_stage_ = 0;
};

// The tensors of `params` (or of a gradient struct) in canonical order: tensors()[i] is the i-th.
std::vector<Tensor<double>*> flat_tensors(DrafterParameters<double>& params);
std::vector<const Tensor<double>*> flat_tensors(const DrafterParameters<double>& params);

// flat_runs (reference/drafter_parameters.hpp) over the layout's tensors.
inline std::vector<FlatRun> flat_runs(const FlatLayout& layout, std::int64_t begin, std::int64_t n) {
  return flat_runs(layout.sizes(), begin, n);
}

// Copies flat elements [begin, begin + out.size()) of `params` into out (0 beyond P), and back.
void read_flat(const FlatLayout& layout, const DrafterParameters<double>& params, std::int64_t begin,
               std::span<double> out);
void write_flat(const FlatLayout& layout, DrafterParameters<double>& params, std::int64_t begin,
                std::span<const double> values);

}  // namespace dflash
