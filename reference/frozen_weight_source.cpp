#include "reference/frozen_weight_source.hpp"

#include <algorithm>
#include <cmath>

#include "io/errors.hpp"

namespace dflash {

void FrozenWeightsInMemory::read(FrozenTensor which, std::int64_t first, std::span<double> out) const {
  const Tensor<double>& t = which == FrozenTensor::embed_tokens ? frozen_.embed_tokens : frozen_.lm_head;
  if (first < 0 || std::int64_t(out.size()) > t.numel() - first) {
    throw std::logic_error(str("frozen weights: elements [", first, ", ", first + std::int64_t(out.size()),
                               ") of a tensor of ", t.numel()));
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double v = t[first + std::int64_t(i)];
    if (!std::isfinite(v)) {
      throw_input_error(which == FrozenTensor::embed_tokens ? "frozen embed_tokens" : "frozen lm_head",
                        str("element ", first + std::int64_t(i), " is ", v, "; every value must be finite"));
    }
    out[i] = v;
  }
}

FrozenWeights<double> load_frozen_weights(MemoryTracker& tracker, const DrafterConfig& config,
                                          const FrozenWeightSource& source) {
  const std::int64_t V = config.vocab_size, H = config.hidden_size;
  FrozenWeights<double> f{Tensor<double>(tracker, MemoryCategory::frozen, {V, H}),
                          Tensor<double>(tracker, MemoryCategory::frozen, {V, H})};
  for (const FrozenTensor which : {FrozenTensor::embed_tokens, FrozenTensor::lm_head}) {
    Tensor<double>& t = which == FrozenTensor::embed_tokens ? f.embed_tokens : f.lm_head;
    for (std::int64_t first = 0; first < t.numel(); first += kFrozenPieceElements) {
      const std::int64_t n = std::min(kFrozenPieceElements, t.numel() - first);
      source.read(which, first, std::span<double>(t.data() + first, std::size_t(n)));
    }
  }
  return f;
}

}  // namespace dflash
