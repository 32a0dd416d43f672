#include "bench/cuda/drafter_step_metrics.hpp"

#include <algorithm>

#include "io/errors.hpp"

namespace dflash {

std::int64_t attention_visible_pairs(std::span<const std::int64_t> anchors, std::span<const std::uint8_t> keep,
                                     std::int64_t block_size, bool sliding, std::int64_t window) {
  if (anchors.size() != keep.size()) {
    throw_input_error("keep", str(keep.size(), " flags for ", anchors.size(), " anchors"));
  }
  if (sliding && window < block_size) {
    throw_input_error("sliding_window", str(window, " is below block_size ", block_size));
  }
  std::int64_t pairs = 0;
  for (std::size_t n = 0; n < anchors.size(); ++n) {
    if (keep[n] == 0) continue;
    const std::int64_t a = anchors[n];
    for (std::int64_t k = 0; k < block_size; ++k) {
      pairs += sliding ? std::min(a, window - 1 - k) + (k + 1) : a + block_size;
    }
  }
  return pairs;
}

StepFlops drafter_step_flops(const DrafterDims& m, std::span<const std::int64_t> visible_pairs, bool features_grad,
                             TrunkPolicy trunk_policy, LossPolicy loss_policy) {
  if (static_cast<std::int64_t>(visible_pairs.size()) != m.L) {
    throw_input_error("visible_pairs", str(visible_pairs.size(), " layers for L = ", m.L));
  }
  const double T = double(m.T), S = double(m.S), H = double(m.H), I = double(m.I), d = double(m.d);
  const double q = double(m.nh) * d, kv = double(m.nkv) * d;
  const double layer_weights = H * q + 2 * H * kv + q * H + 3 * H * I;
  const double context_kv = 2 * S * 2 * H * kv;  // forward of the context keys and values, one layer
  StepFlops f;
  for (std::int64_t l = 0; l < m.L; ++l) {
    const double heads_pairs = double(m.nh) * double(visible_pairs[static_cast<std::size_t>(l)]);
    f.block_linear += 6 * T * layer_weights;
    f.context += 3 * context_kv;
    f.attention_forward += 4 * d * heads_pairs;
    f.attention_backward += 8 * d * heads_pairs;
    if (trunk_policy == TrunkPolicy::none) continue;
    f.trunk_recompute += 2 * T * layer_weights + context_kv;
    f.attention_recompute += 4 * d * heads_pairs;
  }
  f.context += (features_grad ? 6 : 4) * S * double(m.K) * H * H;
  const double vocab_product = 2 * T * H * double(m.V);
  f.loss_head = 3 * vocab_product;
  if (loss_policy == LossPolicy::chunk_recompute) f.loss_recompute = 2 * vocab_product;
  return f;
}

namespace {

std::string gib(std::int64_t bytes) { return str(double(bytes) / double(1ll << 30)); }

}  // namespace

std::vector<std::string> plan_excess_misses(const std::vector<CategoryComparison>& comparisons) {
  std::vector<std::string> misses;
  for (const CategoryComparison& c : comparisons) {
    if (double(c.measured) <= (1 + kPlanExcessTarget) * double(c.planned)) continue;
    misses.push_back(str(category_name(c.category), ": measured ", gib(c.measured).substr(0, 6), " GiB > planned ",
                         gib(c.planned).substr(0, 6), " GiB + ", 100 * kPlanExcessTarget, "%"));
  }
  return misses;
}

std::vector<std::string> step_target_misses(double model_tflops, double card_tflops,
                                            const std::vector<CategoryComparison>& comparisons) {
  std::vector<std::string> misses;
  if (!(model_tflops >= kStepMfuTarget * card_tflops)) {
    misses.push_back(
        str("MFU ", 100 * model_tflops / card_tflops, "% of the measured GEMM rate < ", 100 * kStepMfuTarget, "%"));
  }
  for (std::string& m : plan_excess_misses(comparisons)) misses.push_back("peak above plan: " + std::move(m));
  return misses;
}

}  // namespace dflash
