#include "golden/training.hpp"

#include <limits>

#include <nlohmann/json.hpp>

#include "common/tolerances.hpp"
#include "distributed/single_process_communicator.hpp"
#include "distributed/train_step.hpp"
#include "golden/cases.hpp"
#include "io/safetensors_reader.hpp"
#include "io/safetensors_writer.hpp"
#include "io/strict_json.hpp"
#include "reference/compare.hpp"
#include "reference/drafter_problem.hpp"

namespace dflash {

using safetensors::Dtype;

namespace {

constexpr std::size_t kMaxConfigDepth = 8;  // as golden_file.cpp: configs nest a few levels at most

const char* const kFloatMetrics[] = {"loss", "ce", "kl", "accuracy", "weight_sum", "lr", "grad_norm"};
const char* const kIntegerMetrics[] = {"clipped", "tokens"};

[[noreturn]] void training_golden_error(std::string_view source, const std::string& problem) {
  throw_input_error(str("training golden ", source), problem);
}

std::string step_input(std::int64_t t, std::string_view what) { return str("input/step", t, "/", what); }

std::vector<GoldenTensorSpec> training_golden_specs(const DrafterConfig& c, std::int64_t steps, std::int64_t nseq,
                                                    std::int64_t S) {
  std::vector<GoldenTensorSpec> specs;
  for (std::int64_t t = 0; t < steps; ++t) {
    specs.push_back({step_input(t, "tokens"), Dtype::I64, {nseq, S}});
    specs.push_back({step_input(t, "loss_mask"), Dtype::I64, {nseq, S}});
    specs.push_back({step_input(t, "target_features"), Dtype::F64, {nseq, S, c.feature_width()}});
    specs.push_back({step_input(t, "teacher_hidden"), Dtype::F64, {nseq, S, c.hidden_size}});
  }
  specs.push_back({"frozen/embed_tokens.weight", Dtype::F64, {c.vocab_size, c.hidden_size}});
  specs.push_back({"frozen/lm_head.weight", Dtype::F64, {c.vocab_size, c.hidden_size}});
  for (const ParameterShape& p : drafter_parameter_shapes(c)) {
    for (const char* prefix : {"initial/param/", "final/param/", "final/exp_avg/", "final/exp_avg_sq/"}) {
      specs.push_back({prefix + p.name, Dtype::F64, p.shape});
    }
  }
  for (const char* m : kFloatMetrics) specs.push_back({str("metrics/", m), Dtype::F64, {steps}});
  for (const char* m : kIntegerMetrics) specs.push_back({str("metrics/", m), Dtype::I64, {steps}});
  return specs;
}

// The steps of the reference training core from the golden's inputs: final state and metrics.
GoldenResults run_reference_training(MemoryTracker& tracker, const TrainingGolden& g) {
  SingleProcessCommunicator comm;
  TrainingState state =
      make_training_state(tracker, g.config, g.training, comm, convert_parameters<double>(tracker, g.initial));
  std::vector<StepMetrics> metrics;
  for (std::int64_t t = 0; t < g.steps; ++t) {
    const RankSequences all{0, &g.batches[static_cast<std::size_t>(t)]};
    metrics.push_back(train_step(tracker, comm, g.config, g.training, g.frozen, state, {&all, 1}));
  }
  const FlatLayout layout(g.config, 1, g.training.zero_stage);
  return training_golden_results(layout, state.optimizer.master.span(), state.optimizer.exp_avg.span(),
                                 state.optimizer.exp_avg_sq.span(), metrics);
}

nlohmann::json config_json(const TrainingGolden& g) {
  nlohmann::json j = drafter_config_to_json(g.config);
  j.update(training_config_to_json(g.training));
  return j;
}

}  // namespace

bool is_integer_metric(std::string_view name) {
  for (const char* m : kIntegerMetrics) {
    if (name == str("metrics/", m)) return true;
  }
  return false;
}

GoldenResults training_golden_results(const FlatLayout& layout, std::span<const double> master,
                                      std::span<const double> exp_avg, std::span<const double> exp_avg_sq,
                                      std::span<const StepMetrics> metrics) {
  GoldenResults r;
  for (const FlatTensor& ft : layout.tensors()) {
    auto part = [&](std::span<const double> v) {
      const auto at = v.begin() + ft.offset;
      return GoldenTensor{ft.shape, std::vector<double>(at, at + ft.numel)};
    };
    r["final/param/" + ft.name] = part(master);
    r["final/exp_avg/" + ft.name] = part(exp_avg);
    r["final/exp_avg_sq/" + ft.name] = part(exp_avg_sq);
  }
  auto series = [&](auto field) {
    GoldenTensor s{{std::int64_t(metrics.size())}, {}};
    for (const StepMetrics& m : metrics) s.values.push_back(static_cast<double>(field(m)));
    return s;
  };
  r["metrics/loss"] = series([](const StepMetrics& m) { return m.loss; });
  r["metrics/ce"] = series([](const StepMetrics& m) { return m.ce; });
  r["metrics/kl"] = series([](const StepMetrics& m) { return m.kl; });
  r["metrics/accuracy"] = series([](const StepMetrics& m) { return m.accuracy; });
  r["metrics/weight_sum"] = series([](const StepMetrics& m) { return m.weight_sum; });
  r["metrics/lr"] = series([](const StepMetrics& m) { return m.lr; });
  r["metrics/grad_norm"] = series([](const StepMetrics& m) { return m.grad_norm; });
  r["metrics/clipped"] = series([](const StepMetrics& m) { return m.clipped ? 1 : 0; });
  r["metrics/tokens"] = series([](const StepMetrics& m) { return m.tokens; });
  return r;
}

const std::vector<TrainingGoldenCase>& training_golden_cases() {
  static const std::vector<TrainingGoldenCase> cases = [] {
    TrainingGoldenCase c;
    c.name = "tiny-3-steps";
    c.summary =
        "3 AdamW steps, 4 sequences per step in 2 micro-steps, dropout on, clipping active, warm-up then cosine";
    const GoldenCase& step = golden_case("dropout");  // the step golden with dropout at all three sites
    c.config = step.config;
    c.training.learning_rate = 0.01;
    c.training.min_learning_rate = 0.001;
    c.training.warmup_steps = 1;
    c.training.total_steps = 3;
    c.training.weight_decay = 0.1;
    c.training.max_grad_norm = 0.5;
    c.training.global_batch_sequences = 4;
    c.training.micro_steps = 2;
    c.training.zero_stage = 1;
    c.training.max_context = 16;
    c.context_length = 14;
    c.data_seed = 7007;
    c.parameter_seed = 31;
    return std::vector<TrainingGoldenCase>{c};
  }();
  return cases;
}

const TrainingGoldenCase& training_golden_case(std::string_view name) {
  std::string known;
  for (const TrainingGoldenCase& c : training_golden_cases()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  throw_input_error("training golden case", str("'", name, "' is not one of: ", known));
}

TrainingGolden generate_training_golden(const TrainingGoldenCase& c) {
  TrainingGolden g;
  g.source = "generated case " + c.name;
  g.case_name = c.name;
  g.config = c.config;
  g.training = c.training;
  g.steps = c.steps;
  validate_drafter_config(g.config);
  validate_training_config(g.training);
  MemoryTracker& tracker = *g.tracker;
  for (std::int64_t t = 0; t < c.steps; ++t) {
    g.batches.push_back(make_drafter_batch<double>(tracker, c.config,
                                                   {.sequences = c.training.global_batch_sequences,
                                                    .context_length = c.context_length,
                                                    .seed = c.data_seed + std::uint64_t(t)}));
  }
  g.frozen = init_frozen_weights<double>(tracker, c.config, c.parameter_seed + 1);
  g.initial = init_drafter_parameters<double>(tracker, c.config, c.parameter_seed, 0.3);
  g.results = run_reference_training(tracker, g);
  return g;
}

void write_training_golden(const TrainingGolden& g, const std::filesystem::path& path) {
  safetensors::Writer w;
  w.set_metadata("format", std::string(kTrainingGoldenFormat));
  w.set_metadata("version", std::string(kTrainingGoldenVersion));
  w.set_metadata("case", g.case_name);
  w.set_metadata("config", config_json(g).dump());
  w.set_metadata("seed", std::to_string(g.config.seed));
  w.set_metadata("steps", std::to_string(g.steps));
  auto floats = [&](const std::string& name, const Tensor<double>& t) {
    w.add_floats(name, Dtype::F64, t.shape(), t.span());
  };
  auto integers = [&](const std::string& name, const Shape& shape, const auto& values) {
    const std::vector<std::int64_t> wide(values.begin(), values.end());
    w.add_integers(name, Dtype::I64, shape, wide);
  };
  for (std::int64_t t = 0; t < g.steps; ++t) {
    const DrafterBatch<double>& b = g.batches[static_cast<std::size_t>(t)];
    integers(step_input(t, "tokens"), b.tokens.shape(), b.tokens.values());
    integers(step_input(t, "loss_mask"), b.loss_mask.shape(), b.loss_mask.values());
    floats(step_input(t, "target_features"), b.target_features);
    floats(step_input(t, "teacher_hidden"), b.teacher_hidden);
  }
  floats("frozen/embed_tokens.weight", g.frozen.embed_tokens);
  floats("frozen/lm_head.weight", g.frozen.lm_head);
  g.initial.for_each([&](const std::string& name, const Tensor<double>& t) { floats("initial/param/" + name, t); });
  for (const auto& [name, t] : g.results) {
    if (is_integer_metric(name)) {
      integers(name, t.shape, t.values);
    } else {
      w.add_floats(name, Dtype::F64, t.shape, t.values);
    }
  }
  w.write_file(path);
}

TrainingGolden read_training_golden(const std::filesystem::path& path) {
  const safetensors::Reader reader = safetensors::Reader::open_file(path);
  const std::string& source = reader.source();
  const safetensors::Metadata& meta = reader.metadata();
  for (const char* key : {"format", "version", "case", "config", "seed", "steps"}) {
    if (!meta.contains(key)) training_golden_error(source, str("metadata '", key, "' is missing"));
  }
  if (meta.size() != 6) training_golden_error(source, str("metadata has ", meta.size(), " keys; expected 6"));
  if (meta.at("format") != kTrainingGoldenFormat) {
    training_golden_error(
        source, str("format ", safetensors::clipped_quote(meta.at("format")), " is not ", kTrainingGoldenFormat));
  }
  if (meta.at("version") != kTrainingGoldenVersion) {
    training_golden_error(
        source, str("version ", safetensors::clipped_quote(meta.at("version")), " is not ", kTrainingGoldenVersion));
  }
  TrainingGolden g;
  g.source = source;
  g.case_name = meta.at("case");
  const std::string where = str(source, " (metadata 'config')");
  const nlohmann::json config = safetensors::parse_strict_json(meta.at("config"), where, kMaxConfigDepth);
  g.config = drafter_config_from_json(config, where);
  g.training = training_config_from_json(config, where);
  if (meta.at("seed") != std::to_string(g.config.seed)) {
    training_golden_error(source, str("metadata seed ", meta.at("seed"), " is not the config's ", g.config.seed));
  }
  const std::string& steps = meta.at("steps");
  if (steps.empty() || steps.size() > 6 || steps.find_first_not_of("0123456789") != std::string::npos || steps == "0") {
    training_golden_error(source,
                          str("metadata steps ", safetensors::clipped_quote(steps), " is not a count in [1, 999999]"));
  }
  g.steps = std::stoll(steps);
  const std::string first = step_input(0, "tokens");
  if (!reader.contains(first) || reader.info(first).shape.size() != 2) {
    training_golden_error(source, str("tensor '", first, "' is missing or not [nseq, S]"));
  }
  const std::int64_t nseq = reader.info(first).shape[0], S = reader.info(first).shape[1];
  check_golden_tensor_table(reader, training_golden_specs(g.config, g.steps, nseq, S));

  MemoryTracker& tracker = *g.tracker;
  auto floats = [&](const std::string& name) {
    return Tensor<double>(tracker, MemoryCategory::inputs, reader.info(name).shape, reader.doubles(name));
  };
  for (std::int64_t t = 0; t < g.steps; ++t) {
    const std::string tokens = step_input(t, "tokens"), mask = step_input(t, "loss_mask");
    DrafterBatch<double> b{Tensor<std::int64_t>(tracker, MemoryCategory::inputs, {nseq, S}, reader.int64s(tokens)),
                           Tensor<std::uint8_t>(tracker, MemoryCategory::inputs, {nseq, S}),
                           floats(step_input(t, "target_features")),
                           floats(step_input(t, "teacher_hidden")),
                           std::nullopt,
                           std::nullopt};
    const std::vector<std::int64_t> m = reader.int64s(mask);
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (m[i] != 0 && m[i] != 1)
        training_golden_error(source, str("tensor '", mask, "' element ", i, " is ", m[i], ", not 0 or 1"));
      b.loss_mask[static_cast<std::int64_t>(i)] = static_cast<std::uint8_t>(m[i]);
    }
    validate_drafter_batch(g.config, b, 0);
    g.batches.push_back(std::move(b));
  }
  g.frozen = FrozenWeights<double>{floats("frozen/embed_tokens.weight"), floats("frozen/lm_head.weight")};
  g.initial = make_drafter_parameters<double>(tracker, g.config, MemoryCategory::parameters);
  g.initial.for_each([&](const std::string& name, Tensor<double>& t) { t = floats("initial/param/" + name); });
  validate_drafter_parameters(g.config, g.initial, g.frozen);
  for (const std::string& name : reader.names()) {
    if (name.starts_with("final/") || name.starts_with("metrics/")) {
      std::vector<double> values = reader.doubles(name);
      for (double v : values) {
        if (!std::isfinite(v))
          training_golden_error(source, str("tensor '", name, "' holds ", v, "; results must be finite"));
      }
      g.results[name] = GoldenTensor{reader.info(name).shape, std::move(values)};
    }
  }
  return g;
}

TrainingGoldenImplementation reference_training_golden_implementation() {
  return {"reference",
          "the double-precision reference training core on one process (train_step, AdamW, ZeRO as configured)",
          [](MemoryTracker& tracker, const TrainingGolden& g) {
            GoldenOutputs out = with_tolerance(run_reference_training(tracker, g), kReferenceTolerance);
            for (auto& [name, tolerance] : out.tolerance) {
              if (is_integer_metric(name)) tolerance = 0;  // counts and flags: exact
            }
            return out;
          }};
}

std::vector<GoldenCheckRow> check_training_golden_file(const std::filesystem::path& path,
                                                       const TrainingGoldenImplementation& implementation) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const std::string file = path.string();
  try {
    const TrainingGolden golden = read_training_golden(path);
    MemoryTracker tracker;
    const GoldenOutputs computed = implementation.compute(tracker, golden);
    if (computed.tensors.empty()) return {{file, "(file)", kInf, 0, "the implementation produced no tensors"}};
    std::vector<GoldenCheckRow> rows;
    for (const auto& [name, t] : computed.tensors) {
      GoldenCheckRow row{file, name, kInf, 0, ""};
      const auto tolerance = computed.tolerance.find(name);
      const auto want = golden.results.find(name);
      if (tolerance == computed.tolerance.end()) {
        row.note = "the implementation gave no tolerance for it";
      } else if (want == golden.results.end()) {
        row.tolerance = tolerance->second;
        row.note = "not a final/ or metrics/ tensor of the golden";
      } else if (want->second.shape != t.shape) {
        row.tolerance = tolerance->second;
        row.note = str("shape ", shape_string(t.shape), ", the golden has ", shape_string(want->second.shape));
      } else {
        row.tolerance = tolerance->second;
        row.error = relative_error(std::span<const double>(t.values), std::span<const double>(want->second.values));
      }
      rows.push_back(std::move(row));
    }
    return rows;
  } catch (const std::exception& e) {
    return {{file, "(file)", kInf, 0, e.what()}};
  }
}

std::filesystem::path default_training_golden_dir() { return default_golden_dir() / "training"; }

}  // namespace dflash
