#include "golden/cases.hpp"

#include <cstdlib>
#include <set>

#include "distributed/weights/drafter_export.hpp"
#include "io/hf_checkpoint.hpp"
#include "io/sha256.hpp"

namespace dflash {

namespace {

using enum LayerType;

// Each config is small enough that all goldens together stay well under 2 MB (F64 everywhere),
// and each case varies what the others keep fixed; between them they use every trunk and loss
// policy (all give the same results, SPEC §7).
std::vector<GoldenCase> make_cases() {
  std::vector<GoldenCase> cases;

  cases.push_back({.name = "tiny-full",
                   .summary = "two full-attention layers, nh = nkv, no dropout, tau 1, no decay",
                   .config = {.hidden_size = 8,
                              .intermediate_size = 16,
                              .num_attention_heads = 2,
                              .num_key_value_heads = 2,
                              .head_dim = 4,
                              .num_hidden_layers = 2,
                              .vocab_size = 32,
                              .block_size = 4,
                              .mask_token_id = 31,
                              .target_layer_ids = {1, 3},
                              .layer_types = {full_attention, full_attention},
                              .sliding_window = std::nullopt,
                              .max_anchors = 3,
                              .loss_decay_gamma = std::nullopt,
                              .seed = 101,
                              .loss_policy = LossPolicy::materialize,
                              .trunk_policy = TrunkPolicy::none},
                   .batch = {.sequences = 2, .context_length = 14, .seed = 1001, .mask_hole_fraction = 0.1},
                   .parameter_seed = 11});

  cases.push_back({.name = "gqa-sliding",
                   .summary = "GQA 4 query heads on 2 kv heads, head_dim 8 (nh d = 2 H), a sliding layer with "
                              "window 3 then a full one, K = 3, mask token 0, decay gamma 7",
                   .config = {.hidden_size = 16,
                              .intermediate_size = 24,
                              .num_attention_heads = 4,
                              .num_key_value_heads = 2,
                              .head_dim = 8,
                              .num_hidden_layers = 2,
                              .vocab_size = 48,
                              .block_size = 4,
                              .mask_token_id = 0,
                              .target_layer_ids = {2, 5, 9},
                              .layer_types = {sliding_attention, full_attention},
                              .sliding_window = 3,
                              .max_anchors = 4,
                              .loss_decay_gamma = 7.0,
                              .seed = 202,
                              .loss_chunk_rows = 5,
                              .loss_policy = LossPolicy::chunk_recompute,
                              .trunk_policy = TrunkPolicy::per_layer},
                   .batch = {.sequences = 2, .context_length = 20, .seed = 2002, .mask_hole_fraction = 0.15},
                   .parameter_seed = 21,
                   .step = 3});

  cases.push_back({.name = "dropout",
                   .summary = "attention dropout 0.25 and hidden dropout 0.2 (all three sites), three layers "
                              "(full, sliding, full), MQA, a seed above 2^32, step 7",
                   .config = {.hidden_size = 8,
                              .intermediate_size = 16,
                              .num_attention_heads = 2,
                              .num_key_value_heads = 1,
                              .head_dim = 4,
                              .num_hidden_layers = 3,
                              .vocab_size = 32,
                              .block_size = 4,
                              .mask_token_id = 31,
                              .target_layer_ids = {0, 2},
                              .layer_types = {full_attention, sliding_attention, full_attention},
                              .sliding_window = 5,
                              .max_anchors = 3,
                              .loss_decay_gamma = std::nullopt,
                              .attention_dropout = 0.25,
                              .hidden_dropout = 0.2,
                              .seed = 0x9E3779B97F4A7C15ull,
                              .loss_chunk_rows = 4,
                              .loss_policy = LossPolicy::chunk_grad_in_forward,
                              .trunk_policy = TrunkPolicy::every_k,
                              .checkpoint_every = 2},
                   .batch = {.sequences = 2, .context_length = 16, .seed = 3003, .mask_hole_fraction = 0.1},
                   .parameter_seed = 31,
                   .step = 7});

  cases.push_back({.name = "temperature-decay",
                   .summary = "temperature 0.7, decay gamma 2.5, hard 0.6 / soft 0.4, block size 5",
                   .config = {.hidden_size = 8,
                              .intermediate_size = 16,
                              .num_attention_heads = 2,
                              .num_key_value_heads = 2,
                              .head_dim = 4,
                              .num_hidden_layers = 2,
                              .vocab_size = 40,
                              .block_size = 5,
                              .mask_token_id = 39,
                              .target_layer_ids = {1, 2},
                              .layer_types = {full_attention, full_attention},
                              .sliding_window = std::nullopt,
                              .max_anchors = 3,
                              .loss_decay_gamma = 2.5,
                              .hard_weight = 0.6,
                              .soft_weight = 0.4,
                              .temperature = 0.7,
                              .seed = 404,
                              .loss_chunk_rows = 3,
                              .loss_policy = LossPolicy::chunk_retain,
                              .trunk_policy = TrunkPolicy::per_layer},
                   .batch = {.sequences = 2, .context_length = 18, .seed = 4004, .mask_hole_fraction = 0.1},
                   .parameter_seed = 41,
                   .step = 5});

  cases.push_back({.name = "holes-invalid",
                   .summary = "four sequences, loss mask 45% holes, one sequence with no labels at all: loss-mask "
                              "holes inside blocks and invalid blocks (kappa = 0); head_dim 2, K = 1",
                   .config = {.hidden_size = 8,
                              .intermediate_size = 16,
                              .num_attention_heads = 4,
                              .num_key_value_heads = 2,
                              .head_dim = 2,
                              .num_hidden_layers = 2,
                              .vocab_size = 32,
                              .block_size = 4,
                              .mask_token_id = 7,
                              .target_layer_ids = {3},
                              .layer_types = {sliding_attention, full_attention},
                              .sliding_window = 4,
                              .max_anchors = 4,
                              .loss_decay_gamma = 7.0,
                              .seed = 505,
                              .loss_chunk_rows = 7,
                              .loss_policy = LossPolicy::chunk_recompute,
                              .trunk_policy = TrunkPolicy::every_k,
                              .checkpoint_every = 1},
                   .batch = {.sequences = 4, .context_length = 14, .seed = 5005, .mask_hole_fraction = 0.45},
                   .unlabelled_sequences = {2},
                   .parameter_seed = 51,
                   .step = 11});

  cases.push_back({.name = "short-context",
                   .summary = "S 6 with block size 5: block rows run past the sequence end (weight 0, RoPE "
                              "positions beyond S); sliding window 2",
                   .config = {.hidden_size = 8,
                              .intermediate_size = 16,
                              .num_attention_heads = 2,
                              .num_key_value_heads = 1,
                              .head_dim = 4,
                              .num_hidden_layers = 2,
                              .vocab_size = 32,
                              .block_size = 5,
                              .mask_token_id = 31,
                              .target_layer_ids = {1, 3},
                              .layer_types = {sliding_attention, full_attention},
                              .sliding_window = 2,
                              .max_anchors = 3,
                              .loss_decay_gamma = std::nullopt,
                              .seed = 606,
                              .loss_chunk_rows = 1,
                              .loss_policy = LossPolicy::chunk_grad_in_forward,
                              .trunk_policy = TrunkPolicy::none},
                   .batch = {.sequences = 2, .context_length = 6, .seed = 6006, .mask_hole_fraction = 0.0},
                   .parameter_seed = 61,
                   .step = 2});

  for (const GoldenCase& c : cases) validate_drafter_config(c.config, str("golden case ", c.name));
  return cases;
}

}  // namespace

const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = make_cases();
  return cases;
}

const GoldenCase& golden_case(std::string_view name) {
  std::string known;
  for (const GoldenCase& c : golden_cases()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  throw_input_error("golden case", str("'", name, "' is not one of: ", known));
}

std::string golden_file_name(std::string_view case_name) { return str(case_name, ".safetensors"); }

std::string golden_weights_provenance(const std::filesystem::path& dir) {
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  std::set<std::string> files;
  for (const std::string& name : checkpoint.names()) files.insert(checkpoint.shard_of(name));
  std::string text;
  for (const std::string& file : files) {
    text += str(text.empty() ? " (weights " : ", ", file, " sha256 ", sha256_file_hex(dir / file));
  }
  return text + ")";
}

Golden generate_golden(const GoldenCase& c) {
  Golden g;
  g.source = str("generated case ", c.name);
  g.case_name = c.name;
  g.config = c.config;
  g.step = c.step;
  MemoryTracker& tracker = *g.tracker;
  if (c.weights) {
    g.params = std::move(import_drafter(tracker, *c.weights, &c.config, kGoldenWeightsFlag).params);
    g.case_name += golden_weights_provenance(*c.weights);
  } else {
    g.params = init_drafter_parameters<double>(tracker, c.config, c.parameter_seed, c.norm_jitter);
  }
  g.frozen = init_frozen_weights<double>(tracker, c.config, c.parameter_seed + 1);
  g.batch = make_drafter_batch<double>(tracker, c.config, c.batch);
  for (std::int64_t b : c.unlabelled_sequences) {
    std::fill_n(g.batch.loss_mask.row(b), g.batch.context_length(), std::uint8_t{0});
  }
  // Anchors sampled in the step (SPEC §4), then stored: a golden is recomputed from them.
  DrafterStepResult<double> r = drafter_step(tracker, g.config, g.params, g.frozen, g.batch, g.step_options());
  r.outputs.anchors.recategorize(MemoryCategory::inputs);
  r.outputs.keep.recategorize(MemoryCategory::inputs);
  g.batch.anchors.emplace(std::move(r.outputs.anchors));
  g.batch.keep.emplace(std::move(r.outputs.keep));
  g.results = golden_results_of(r);
  return g;
}

std::filesystem::path default_golden_dir() {
  const char* env = std::getenv("DFLASH_GOLDEN_DIR");
  if (env != nullptr && *env != '\0') return env;
  return DFLASH_GOLDEN_SOURCE_DIR;
}

}  // namespace dflash
