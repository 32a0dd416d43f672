#include "distributed/flat_parameters.hpp"

#include <algorithm>

#include "io/errors.hpp"

namespace dflash {

FlatLayout::FlatLayout(const DrafterConfig& config, int ranks, int zero_stage)
    : ranks_(ranks), zero_stage_(zero_stage) {
  if (ranks < 1) throw_input_error("world size", str(ranks, " ranks: at least 1 is needed"));
  if (zero_stage != 0 && zero_stage != 1) throw_input_error("zero_stage", str(zero_stage, " is not 0 or 1"));
  for (const ParameterShape& s : drafter_parameter_shapes(config)) {
    const std::int64_t n = shape_numel(s.shape);
    tensors_.push_back({s.name, s.shape, count_, n, s.shape.size() >= 2});
    sizes_.push_back(n);
    count_ += n;
  }
  padded_ = padded_count(count_, parallel_layout(kDefaultBucketBytes, 1));
}

std::size_t FlatLayout::tensor_at(std::int64_t e) const {
  if (e < 0 || e >= count_) throw_input_error("flat index", str(e, " is outside [0, ", count_, ")"));
  const auto it = std::upper_bound(tensors_.begin(), tensors_.end(), e,
                                   [](std::int64_t x, const FlatTensor& t) { return x < t.offset; });
  return static_cast<std::size_t>(it - tensors_.begin()) - 1;
}

std::vector<Tensor<double>*> flat_tensors(DrafterParameters<double>& params) {
  std::vector<Tensor<double>*> out;
  params.for_each([&](const std::string&, Tensor<double>& t) { out.push_back(&t); });
  return out;
}

std::vector<const Tensor<double>*> flat_tensors(const DrafterParameters<double>& params) {
  std::vector<const Tensor<double>*> out;
  params.for_each([&](const std::string&, const Tensor<double>& t) { out.push_back(&t); });
  return out;
}

void read_flat(const FlatLayout& layout, const DrafterParameters<double>& params, std::int64_t begin,
               std::span<double> out) {
  const auto tensors = flat_tensors(params);
  std::fill(out.begin(), out.end(), 0.0);
  for (const FlatRun& r : flat_runs(layout, begin, static_cast<std::int64_t>(out.size()))) {
    std::copy_n(tensors[r.tensor]->data() + r.at, r.length, out.data() + r.position);
  }
}

void write_flat(const FlatLayout& layout, DrafterParameters<double>& params, std::int64_t begin,
                std::span<const double> values) {
  const auto tensors = flat_tensors(params);
  for (const FlatRun& r : flat_runs(layout, begin, static_cast<std::int64_t>(values.size()))) {
    std::copy_n(values.data() + r.position, r.length, tensors[r.tensor]->data() + r.at);
  }
}

}  // namespace dflash
