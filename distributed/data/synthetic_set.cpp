#include "distributed/data/synthetic_set.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/data/feature_shard_writer.hpp"
#include "io/errors.hpp"
#include "io/file_write.hpp"
#include "io/safetensors.hpp"
#include "reference/counter_rng.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

void validate_synthetic_data_spec(const SyntheticDataSpec& s) {
  if (s.sequences < 1) throw_input_error("--sequences", str(s.sequences, " must be at least 1"));
  if (s.shards < 1 || s.shards > s.sequences) {
    throw_input_error("--shards", str(s.shards, " must lie in [1, sequences = ", s.sequences, "]"));
  }
  if (s.min_length < 2) throw_input_error("--min-length", str(s.min_length, " must be at least 2"));
  if (s.max_length < s.min_length) {
    throw_input_error("--max-length", str(s.max_length, " is below --min-length = ", s.min_length));
  }
  if (!(s.noise >= 0 && s.noise <= 1)) throw_input_error("--noise", str(s.noise, " must lie in [0, 1]"));
  if (!safetensors::dtype_is_float(s.feature_dtype) || s.feature_dtype == safetensors::Dtype::F64) {
    throw_input_error("--feature-dtype", str(safetensors::dtype_name(s.feature_dtype), " is not BF16, F16 or F32"));
  }
}

std::int64_t synthetic_successor(const DrafterConfig& c, std::int64_t token) {
  // Text tokens are [0, V) without the mask token: index them 0 .. V-2, map, and skip it again.
  const std::int64_t text = c.vocab_size - 1;
  const std::int64_t index = token > c.mask_token_id ? token - 1 : token;
  const std::int64_t next = (5 * index + 3) % text;
  return next >= c.mask_token_id ? next + 1 : next;
}

std::int64_t synthetic_target_depth(const DrafterConfig& c) {
  return c.num_target_layers.value_or(*std::max_element(c.target_layer_ids.begin(), c.target_layer_ids.end()) + 1);
}

namespace {

std::int64_t random_text_token(const DrafterConfig& c, CounterRng& rng) {
  const std::int64_t t = rng.below(c.vocab_size - 1);
  return t >= c.mask_token_id ? t + 1 : t;
}

void write_target(const DrafterConfig& c, const SyntheticDataSpec& spec, const FrozenWeights<double>& frozen,
                  const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  safetensors::Writer w;
  w.set_metadata("format", "pt");
  const safetensors::Shape shape{c.vocab_size, c.hidden_size};
  w.add_floats("model.embed_tokens.weight", safetensors::Dtype::BF16, shape, frozen.embed_tokens.span());
  w.add_floats("lm_head.weight", safetensors::Dtype::BF16, shape, frozen.lm_head.span());
  w.write_file(dir / "model.safetensors");
  const nlohmann::json config = {{"architectures", {"SyntheticTargetForCausalLM"}},
                                 {"hidden_size", c.hidden_size},
                                 {"num_hidden_layers", synthetic_target_depth(c)},
                                 {"vocab_size", c.vocab_size},
                                 {"tie_word_embeddings", false},
                                 {"dflash_synthetic_seed", spec.seed}};
  write_file_atomically(dir / "config.json", config.dump(2) + "\n");
}

}  // namespace

void write_synthetic_data(const DrafterConfig& c, const SyntheticDataSpec& spec, const std::filesystem::path& out) {
  validate_synthetic_data_spec(spec);
  if (c.vocab_size < 2) throw_input_error("vocab_size", str(c.vocab_size, " leaves no text token besides the mask"));
  // The config's own sizes fit (validate_drafter_config); a sequence's features are max_length K H.
  std::int64_t sequence_values = 0;
  if (__builtin_mul_overflow(spec.max_length, c.feature_width(), &sequence_values) ||
      sequence_values > kMaxConfigSizeValues) {
    throw_input_error("--max-length", str(spec.max_length, " rows of ", c.feature_width(), " features exceed the ",
                                          kMaxConfigSizeValues, " values a size may count"));
  }
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && !(std::filesystem::is_directory(out) && std::filesystem::is_empty(out))) {
    throw_input_error("--out", str("'", out.string(), "' exists and is not an empty directory"));
  }
  MemoryTracker tracker;
  const FrozenWeights<double> frozen = init_frozen_weights<double>(tracker, c, spec.seed);
  const std::int64_t H = c.hidden_size, K = c.num_feature_layers(), V = c.vocab_size;

  // A fixed code per token (unit-RMS rows), the same in each of the K feature slots.
  CounterRng code_rng(spec.seed, 0xC0DE);
  std::vector<double> code(std::size_t(V * H));
  for (double& v : code) v = code_rng.uniform(-1, 1) * std::sqrt(3.0);
  // Teacher rows: W_lm's row of the next token, scaled so the teacher's logit gap is large.
  auto teacher_row = [&](std::int64_t next, double* g) {
    double norm = 0;
    for (std::int64_t h = 0; h < H; ++h) norm += frozen.lm_head[next * H + h] * frozen.lm_head[next * H + h];
    const double scale = 4.0 * std::sqrt(double(H)) / std::sqrt(norm);
    for (std::int64_t h = 0; h < H; ++h) g[h] = scale * frozen.lm_head[next * H + h];
  };

  const auto features_dir = out / "features";
  std::filesystem::create_directories(features_dir);
  CounterRng rng(spec.seed, 0x5E0);
  std::int64_t written = 0;
  for (std::int64_t s = 0; s < spec.shards; ++s) {
    FeatureShardContents shard;
    shard.hidden_size = H;
    shard.target_layer_ids = c.target_layer_ids;
    shard.target_model = "synthetic";
    const std::int64_t count = spec.sequences * (s + 1) / spec.shards - written;
    for (std::int64_t q = 0; q < count; ++q) {
      const std::int64_t S = spec.min_length + rng.below(spec.max_length - spec.min_length + 1);
      // One extra token: the teacher of the last row knows the token after it.
      std::vector<std::int64_t> text(std::size_t(S + 1));
      text[0] = random_text_token(c, rng);
      for (std::int64_t p = 1; p <= S; ++p) {
        text[std::size_t(p)] =
            rng.bernoulli(spec.noise) ? random_text_token(c, rng) : synthetic_successor(c, text[std::size_t(p) - 1]);
      }
      const std::int64_t prompt = rng.below(S / 4 + 1);  // unsupervised prompt rows
      const std::vector<std::int64_t> tokens(text.begin(), text.end() - 1);
      std::vector<std::int64_t> mask(static_cast<std::size_t>(S));
      std::vector<double> features(std::size_t(S * K * H)), teacher(std::size_t(S * H));
      for (std::int64_t p = 0; p < S; ++p) {
        mask[std::size_t(p)] = p >= prompt ? 1 : 0;
        for (std::int64_t k = 0; k < K; ++k) {
          for (std::int64_t h = 0; h < H; ++h) {
            features[std::size_t((p * K + k) * H + h)] =
                code[std::size_t(tokens[std::size_t(p)] * H + h)] + 0.1 * rng.uniform(-1, 1);
          }
        }
        teacher_row(text[std::size_t(p) + 1], teacher.data() + p * H);
      }
      shard.append(tokens, mask, features, teacher);
    }
    written += count;
    char name[40];
    std::snprintf(name, sizeof name, "shard-%05lld.safetensors", static_cast<long long>(s));
    write_feature_shard(features_dir / name, shard, spec.feature_dtype);
  }
  write_target(c, spec, frozen, out / "target");
}

}  // namespace dflash
