#include "golden/file.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "io/strict_json.hpp"

namespace dflash {

using safetensors::Dtype;

namespace {

const std::vector<std::string_view> kScalarOutputs = {"output/loss", "output/ce", "output/kl", "output/accuracy",
                                                      "output/weight_sum"};

// Config JSON nests a few levels at most (arrays of layer types); anything deeper is hostile.
constexpr std::size_t kMaxConfigDepth = 8;

template <class T>
std::span<const T> values_of(const Tensor<T>& t) {
  return {t.data(), t.values().size()};
}

// "invalid golden file <source>: <problem>"
[[noreturn]] void golden_error(std::string_view source, const std::string& problem) {
  throw_input_error(str("golden file ", source), problem);
}

const std::string& required_metadata(const safetensors::Metadata& metadata, std::string_view key,
                                     std::string_view source) {
  const auto it = metadata.find(std::string(key));
  if (it == metadata.end()) golden_error(source, str("metadata '", key, "' is missing"));
  return it->second;
}

// A decimal integer with nothing around it (the writer's own form).
template <class Unsigned>
Unsigned parse_decimal(const std::string& text, std::string_view key, std::string_view source) {
  Unsigned value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    golden_error(source, str("metadata '", key, "' = ", safetensors::clipped_quote(text), " is not an integer in [0, ",
                             std::numeric_limits<Unsigned>::max(), "]"));
  }
  return value;
}

DrafterConfig config_from_metadata(const std::string& text, std::string_view source) {
  const std::string where = str(source, " (metadata 'config')");
  const nlohmann::json json = safetensors::parse_strict_json(text, where, kMaxConfigDepth);
  return drafter_config_from_json(json, where);
}

// The dimensions every other tensor is checked against: nseq and S from input/tokens, N from
// input/anchors.
const safetensors::TensorInfo& rank2_info(const safetensors::Reader& reader, std::string_view name) {
  if (!reader.contains(name)) golden_error(reader.source(), str("tensor '", name, "' is missing"));
  const safetensors::TensorInfo& info = reader.info(name);
  if (info.shape.size() != 2 || info.shape[0] < 1 || info.shape[1] < 1) {
    golden_error(reader.source(), str("tensor '", name, "' has shape ", safetensors::format_shape(info.shape),
                                      ", expected two dimensions of at least 1"));
  }
  return info;
}

// A 0/1 flag tensor (loss mask, keep) as bytes, each value checked first (a narrowing cast would
// turn 256 into 0).
Tensor<std::uint8_t> read_flags(const safetensors::Reader& reader, std::string_view name, MemoryTracker& tracker) {
  const std::vector<std::int64_t> v = reader.int64s(name);
  Tensor<std::uint8_t> t(tracker, MemoryCategory::inputs, reader.info(name).shape);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != 0 && v[i] != 1)
      golden_error(reader.source(), str("tensor '", name, "' element ", i, " is ", v[i], ", not 0 or 1"));
    t[static_cast<std::int64_t>(i)] = static_cast<std::uint8_t>(v[i]);
  }
  return t;
}

template <class T>
Tensor<T> read_tensor(const safetensors::Reader& reader, std::string_view name, MemoryTracker& tracker,
                      MemoryCategory category) {
  std::vector<T> values;
  if constexpr (std::is_same_v<T, double>)
    values = reader.doubles(name);
  else
    values = reader.int64s(name);
  return Tensor<T>(tracker, category, reader.info(name).shape, values);
}

std::vector<std::int64_t> widened(const Tensor<std::uint8_t>& t) { return {t.values().begin(), t.values().end()}; }

}  // namespace

void check_golden_tensor_table(const safetensors::Reader& reader, const std::vector<GoldenTensorSpec>& specs) {
  std::set<std::string, std::less<>> expected;
  for (const GoldenTensorSpec& s : specs) {
    expected.insert(s.name);
    if (!reader.contains(s.name)) golden_error(reader.source(), str("tensor '", s.name, "' is missing"));
    const safetensors::TensorInfo& info = reader.info(s.name);
    if (info.dtype != s.dtype) {
      golden_error(reader.source(), str("tensor '", s.name, "' has dtype ", safetensors::dtype_name(info.dtype),
                                        ", expected ", safetensors::dtype_name(s.dtype)));
    }
    if (info.shape != s.shape) {
      golden_error(reader.source(), str("tensor '", s.name, "' has shape ", safetensors::format_shape(info.shape),
                                        ", expected ", safetensors::format_shape(s.shape)));
    }
  }
  for (const std::string& name : reader.names()) {
    if (!expected.contains(name)) {
      golden_error(reader.source(),
                   str("tensor ", safetensors::clipped_quote(name), " is not a SPEC §9 golden tensor"));
    }
  }
}

std::vector<GoldenTensorSpec> golden_tensor_specs(const DrafterConfig& c, std::int64_t nseq, std::int64_t S,
                                                  std::int64_t N) {
  const std::int64_t H = c.hidden_size, V = c.vocab_size, T = N * c.block_size;
  std::vector<GoldenTensorSpec> specs{
      {"input/tokens", Dtype::I64, {nseq, S}},
      {"input/loss_mask", Dtype::I64, {nseq, S}},
      {"input/target_features", Dtype::F64, {nseq, S, c.feature_width()}},
      {"input/teacher_hidden", Dtype::F64, {nseq, S, H}},
      {"input/anchors", Dtype::I64, {nseq, N}},
      {"input/keep", Dtype::I64, {nseq, N}},
      {"frozen/embed_tokens.weight", Dtype::F64, {V, H}},
      {"frozen/lm_head.weight", Dtype::F64, {V, H}},
  };
  const std::vector<ParameterShape> params = drafter_parameter_shapes(c);
  for (const ParameterShape& p : params) specs.push_back({"param/" + p.name, Dtype::F64, p.shape});
  for (std::string_view name : kScalarOutputs) specs.push_back({std::string(name), Dtype::F64, {}});
  specs.push_back({"output/hidden", Dtype::F64, {nseq, T, H}});
  for (const char* name : {"output/lse", "output/token_loss", "output/weights"}) {
    specs.push_back({name, Dtype::F64, {nseq, T}});
  }
  for (const ParameterShape& p : params) specs.push_back({"grad/" + p.name, Dtype::F64, p.shape});
  return specs;
}

GoldenResults golden_results_of(const DrafterStepResult<double>& step) {
  const DrafterOutputs<double>& o = step.outputs;
  GoldenResults r;
  auto scalar = [&](const char* name, double value) { r[name] = GoldenTensor{{}, {value}}; };
  auto tensor = [&](const std::string& name, const Tensor<double>& t) {
    r[name] = GoldenTensor{t.shape(), t.values()};
  };
  scalar("output/loss", o.stats.loss);
  scalar("output/ce", o.stats.ce);
  scalar("output/kl", o.stats.kl);
  scalar("output/accuracy", o.stats.accuracy());
  scalar("output/weight_sum", o.weight_sum);
  tensor("output/hidden", o.hidden);
  tensor("output/lse", o.lse);
  tensor("output/token_loss", o.token_loss);
  tensor("output/weights", o.weights);
  step.grads.for_each([&](const std::string& name, const Tensor<double>& g) { tensor("grad/" + name, g); });
  return r;
}

double golden_scalar(const GoldenResults& results, std::string_view name) {
  const auto it = results.find(name);
  if (it == results.end()) throw std::out_of_range(str("golden results have no '", name, "'"));
  return it->second.values.at(0);
}

std::vector<GoldenFloatView> golden_float_tensors(const Golden& g) {
  std::vector<GoldenFloatView> views;
  auto add = [&](std::string name, const Tensor<double>& t) {
    views.push_back({std::move(name), &t.shape(), values_of(t)});
  };
  add("input/target_features", g.batch.target_features);
  add("input/teacher_hidden", g.batch.teacher_hidden);
  add("frozen/embed_tokens.weight", g.frozen.embed_tokens);
  add("frozen/lm_head.weight", g.frozen.lm_head);
  g.params.for_each([&](const std::string& name, const Tensor<double>& t) { add("param/" + name, t); });
  for (const auto& [name, t] : g.results) views.push_back({name, &t.shape, std::span<const double>(t.values)});
  std::sort(views.begin(), views.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return views;
}

std::vector<GoldenIntegerTensor> golden_integer_tensors(const Golden& g) {
  return {{"input/anchors", g.batch.anchors->shape(), g.batch.anchors->values()},
          {"input/keep", g.batch.keep->shape(), widened(*g.batch.keep)},
          {"input/loss_mask", g.batch.loss_mask.shape(), widened(g.batch.loss_mask)},
          {"input/tokens", g.batch.tokens.shape(), g.batch.tokens.values()}};
}

safetensors::Metadata golden_metadata(const Golden& g) {
  return {{"format", std::string(kGoldenFormat)},
          {"version", std::string(kGoldenVersion)},
          {"case", g.case_name},
          {"config", drafter_config_to_json(g.config).dump()},
          {"seed", std::to_string(g.config.seed)},
          {"step", std::to_string(g.step)}};
}

namespace {
safetensors::Writer golden_writer(const Golden& g) {
  safetensors::Writer w;
  for (const auto& [key, value] : golden_metadata(g)) w.set_metadata(key, value);
  std::set<std::string, std::less<>> written;
  for (const GoldenIntegerTensor& t : golden_integer_tensors(g)) {
    w.add_integers(t.name, Dtype::I64, t.shape, t.values);
    written.insert(t.name);
  }
  for (const GoldenFloatView& t : golden_float_tensors(g)) {
    w.add_floats(t.name, Dtype::F64, *t.shape, t.values);
    written.insert(t.name);
  }
  // What the reader will demand, checked on the way out.
  const auto specs = golden_tensor_specs(g.config, g.num_sequences(), g.context_length(), g.anchor_slots());
  std::set<std::string, std::less<>> expected;
  for (const GoldenTensorSpec& s : specs) expected.insert(s.name);
  if (written != expected) {
    throw std::logic_error(str("golden '", g.case_name, "' does not hold exactly the SPEC §9 tensors (", written.size(),
                               " written, ", expected.size(), " expected)"));
  }
  return w;
}
}  // namespace

std::vector<std::byte> golden_bytes(const Golden& golden) { return golden_writer(golden).to_bytes(); }

void write_golden(const Golden& golden, const std::filesystem::path& path) { golden_writer(golden).write_file(path); }

Golden read_golden(const std::filesystem::path& path) {
  return golden_from_reader(safetensors::Reader::open_file(path));
}

Golden golden_from_reader(const safetensors::Reader& reader) {
  const std::string& source = reader.source();
  const safetensors::Metadata& metadata = reader.metadata();
  const auto format = metadata.find("format");
  if (format == metadata.end()) golden_error(source, "not a dflash golden: metadata 'format' is missing");
  if (format->second != kGoldenFormat) {
    golden_error(source, str("not a dflash golden: metadata 'format' is ", safetensors::clipped_quote(format->second),
                             ", expected '", kGoldenFormat, "'"));
  }
  const std::string& version = required_metadata(metadata, "version", source);
  if (version != kGoldenVersion) {
    golden_error(source, str("metadata 'version' is ", safetensors::clipped_quote(version),
                             "; this dflash reads version ", kGoldenVersion));
  }
  for (const auto& [key, value] : metadata) {
    if (key != "format" && key != "version" && key != "case" && key != "config" && key != "seed" && key != "step") {
      golden_error(source, str("metadata ", safetensors::clipped_quote(key), " is not a SPEC §9 golden key"));
    }
  }

  Golden g;
  g.source = source;
  g.case_name = required_metadata(metadata, "case", source);
  if (g.case_name.empty()) golden_error(source, "metadata 'case' is empty");
  g.config = config_from_metadata(required_metadata(metadata, "config", source), source);
  const auto seed = parse_decimal<std::uint64_t>(required_metadata(metadata, "seed", source), "seed", source);
  if (seed != g.config.seed) {
    golden_error(source, str("metadata 'seed' = ", seed, " disagrees with the config's seed ", g.config.seed));
  }
  g.step = parse_decimal<std::uint32_t>(required_metadata(metadata, "step", source), "step", source);

  const std::int64_t nseq = rank2_info(reader, "input/tokens").shape[0];
  const std::int64_t S = rank2_info(reader, "input/tokens").shape[1];
  const std::int64_t N = rank2_info(reader, "input/anchors").shape[1];
  check_golden_tensor_table(reader, golden_tensor_specs(g.config, nseq, S, N));

  MemoryTracker& tracker = *g.tracker;
  g.batch.tokens = read_tensor<std::int64_t>(reader, "input/tokens", tracker, MemoryCategory::inputs);
  g.batch.loss_mask = read_flags(reader, "input/loss_mask", tracker);
  g.batch.target_features = read_tensor<double>(reader, "input/target_features", tracker, MemoryCategory::inputs);
  g.batch.teacher_hidden = read_tensor<double>(reader, "input/teacher_hidden", tracker, MemoryCategory::inputs);
  g.batch.anchors.emplace(read_tensor<std::int64_t>(reader, "input/anchors", tracker, MemoryCategory::inputs));
  g.batch.keep.emplace(read_flags(reader, "input/keep", tracker));
  g.frozen.embed_tokens = read_tensor<double>(reader, "frozen/embed_tokens.weight", tracker, MemoryCategory::frozen);
  g.frozen.lm_head = read_tensor<double>(reader, "frozen/lm_head.weight", tracker, MemoryCategory::frozen);
  g.params = make_drafter_parameters<double>(tracker, g.config, MemoryCategory::parameters);
  g.params.for_each([&](const std::string& name, Tensor<double>& t) {
    t = read_tensor<double>(reader, "param/" + name, tracker, MemoryCategory::parameters);
  });
  for (const GoldenTensorSpec& s : golden_tensor_specs(g.config, nseq, S, N)) {
    if (!s.name.starts_with("output/") && !s.name.starts_with("grad/")) continue;
    GoldenTensor t{s.shape, reader.doubles(s.name)};
    for (std::size_t i = 0; i < t.values.size(); ++i) {
      if (!std::isfinite(t.values[i])) {
        golden_error(source, str("tensor '", s.name, "' element ", i, " is ", t.values[i], "; results must be finite"));
      }
    }
    g.results.emplace(s.name, std::move(t));
  }
  // Token ids, anchors, finiteness: what the step itself would reject, reported against the file.
  try {
    validate_drafter_batch(g.config, g.batch, 0);
    validate_drafter_parameters(g.config, g.params, g.frozen);
  } catch (const InputError& e) {
    golden_error(source, e.what());
  }
  return g;
}

}  // namespace dflash
