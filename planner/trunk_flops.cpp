#include "planner/trunk_flops.hpp"

namespace dflash {

namespace {

// Mean context rows a block row sees, anchors spread evenly over [0, S).
double mean_visible_context(const DrafterConfig& c, std::int64_t layer, std::int64_t S) {
  const double s = double(S);
  const bool sliding = !c.layer_types.empty() && c.layer_types[std::size_t(layer)] == LayerType::sliding_attention;
  if (!sliding || !c.sliding_window || *c.sliding_window >= S) return s / 2;
  const double w = double(*c.sliding_window);
  return w - w * w / (2 * s);
}

}  // namespace

double TrunkFlops::forward() const {
  double f = context.forward;
  for (const PhaseFlops& l : layers) f += l.forward;
  return f;
}

double TrunkFlops::backward() const {
  double f = context.backward;
  for (const PhaseFlops& l : layers) f += l.backward;
  return f;
}

TrunkFlops trunk_flops(const DrafterConfig& c, std::int64_t tokens, std::int64_t context) {
  const double T = double(tokens), S = double(context), H = double(c.hidden_size), I = double(c.intermediate_size);
  const double q = double(c.query_width()), kv = double(c.kv_width());
  const double block_linear = 2 * T * (H * q + 2 * H * kv + q * H + 3 * H * I);
  const double context_kv = 2 * S * (2 * H * kv);
  TrunkFlops f;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const double keys = double(c.block_size) + mean_visible_context(c, l, context);
    const double forward = block_linear + context_kv + 4 * T * q * keys;
    f.layers.push_back({forward, 2 * forward});
  }
  const double fc = 2 * S * double(c.feature_width()) * H;
  f.context = {fc, fc};
  return f;
}

}  // namespace dflash
