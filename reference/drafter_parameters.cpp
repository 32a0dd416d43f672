#include "reference/drafter_parameters.hpp"

#include <algorithm>

namespace dflash {

std::vector<ParameterShape> drafter_parameter_shapes(const DrafterConfig& c) {
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, d = c.head_dim;
  const std::int64_t q = c.query_width(), kv = c.kv_width();
  std::vector<ParameterShape> shapes{{"fc.weight", {H, c.feature_width()}}, {"hidden_norm.weight", {H}}};
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string at = "layers." + std::to_string(l) + ".";
    shapes.push_back({at + "input_layernorm.weight", {H}});
    shapes.push_back({at + "self_attn.q_proj.weight", {q, H}});
    shapes.push_back({at + "self_attn.k_proj.weight", {kv, H}});
    shapes.push_back({at + "self_attn.v_proj.weight", {kv, H}});
    shapes.push_back({at + "self_attn.o_proj.weight", {H, q}});
    shapes.push_back({at + "self_attn.q_norm.weight", {d}});
    shapes.push_back({at + "self_attn.k_norm.weight", {d}});
    shapes.push_back({at + "post_attention_layernorm.weight", {H}});
    shapes.push_back({at + "mlp.gate_proj.weight", {I, H}});
    shapes.push_back({at + "mlp.up_proj.weight", {I, H}});
    shapes.push_back({at + "mlp.down_proj.weight", {H, I}});
  }
  shapes.push_back({"norm.weight", {H}});
  return shapes;
}

std::vector<std::int64_t> parameter_sizes(const std::vector<ParameterShape>& shapes) {
  std::vector<std::int64_t> sizes;
  sizes.reserve(shapes.size());
  for (const ParameterShape& s : shapes) sizes.push_back(shape_numel(s.shape));
  return sizes;
}

std::vector<FlatRun> flat_runs(std::span<const std::int64_t> sizes, std::int64_t begin, std::int64_t n) {
  std::vector<FlatRun> runs;
  const std::int64_t end = begin + n;
  std::int64_t offset = 0;  // the flat index of tensor t's first element
  for (std::size_t t = 0; t < sizes.size() && offset < end; offset += sizes[t], ++t) {
    const std::int64_t lo = std::max(offset, begin), hi = std::min(offset + sizes[t], end);
    if (lo < hi) runs.push_back({t, lo - offset, lo - begin, hi - lo});
  }
  return runs;
}

std::int64_t drafter_parameter_count(const DrafterConfig& config) {
  std::int64_t n = 0;
  for (const ParameterShape& s : drafter_parameter_shapes(config)) n += shape_numel(s.shape);
  return n;
}

}  // namespace dflash
