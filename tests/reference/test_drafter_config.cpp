// The drafter config (SPEC §1): the shipped configs load, a released Hugging Face config without
// the training fields loads with the defaults, and every bad field is rejected with a message
// naming the field, the value and the file.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::filesystem::path kConfigs = std::filesystem::path(DFLASH_SOURCE_DIR) / "configs";

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

std::string error_of(const json& j, const std::string& source = "tiny.json") {
  try {
    drafter_config_from_json(j, source);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(DrafterConfig, TinyConfigIsSmallAndHasBothLayerTypes) {
  const DrafterConfig c = load_drafter_config(kConfigs / "tiny.json");
  EXPECT_EQ(c.num_hidden_layers, static_cast<std::int64_t>(c.layer_types.size()));
  EXPECT_TRUE(c.has_sliding_layer());
  EXPECT_NE(c.layer_types.front(), c.layer_types.back());
  // "A few thousand parameters": the count by hand from the shapes of SPEC §3.
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, d = c.head_dim;
  const std::int64_t per_layer =
      H + c.query_width() * H + 2 * c.kv_width() * H + H * c.query_width() + 2 * d + H + 3 * I * H;
  const std::int64_t expected = H * c.feature_width() + H + c.num_hidden_layers * per_layer + H;
  EXPECT_EQ(drafter_parameter_count(c), expected);
  EXPECT_GE(expected, 1000);
  EXPECT_LT(expected, 10000);
}

TEST(DrafterConfig, FullScaleConfigIsTheSpecReferencePoint) {
  const DrafterConfig c = load_drafter_config(kConfigs / "qwen3.6-27b.json");
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.intermediate_size, 17408);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.target_layer_ids, (std::vector<std::int64_t>{1, 16, 31, 46, 61}));
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.mask_token_id, 248070);
  ASSERT_EQ(c.layer_types.size(), 5u);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(c.layer_types[l], LayerType::sliding_attention);
  EXPECT_EQ(c.layer_types[4], LayerType::full_attention);
  EXPECT_EQ(c.sliding_window, 2048);
  EXPECT_EQ(c.block_size, 32);
  EXPECT_EQ(c.max_anchors, 1024);
  EXPECT_EQ(c.max_anchors * c.block_size, 32768);  // T per GPU
}

// The shape of a released DFlash drafter config: mask_token_id and target_layer_ids nested in
// dflash_config, rope_theta in rope_parameters, no training fields, many unrelated keys.
TEST(DrafterConfig, ReleasedHuggingFaceConfigLoadsWithDefaults) {
  const json released = json::parse(R"({
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "torch_dtype": "bfloat16",
    "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "num_hidden_layers": 2, "rms_norm_eps": 1e-06, "vocab_size": 1000,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "block_size": 16, "num_target_layers": 36, "use_sliding_window": false, "sliding_window": null,
    "max_window_layers": 2, "attention_bias": false, "hidden_act": "silu",
    "dflash_config": {"mask_token_id": 999, "target_layer_ids": [1, 9, 17]}
  })");
  const DrafterConfig c = drafter_config_from_json(released, "released.json");
  EXPECT_EQ(c.mask_token_id, 999);
  EXPECT_EQ(c.target_layer_ids, (std::vector<std::int64_t>{1, 9, 17}));
  EXPECT_EQ(c.num_target_layers, 36);  // the target's depth, not K = 3
  EXPECT_EQ(c.num_feature_layers(), 3);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.layer_types, std::vector<LayerType>(2, LayerType::full_attention));
  EXPECT_FALSE(c.sliding_window.has_value());
  const DrafterConfig defaults;
  EXPECT_EQ(c.max_anchors, defaults.max_anchors);
  EXPECT_FALSE(c.loss_decay_gamma.has_value());
  EXPECT_EQ(c.hard_weight, 0.85);
  EXPECT_EQ(c.soft_weight, 0.15);
  EXPECT_EQ(c.temperature, 1.0);
  EXPECT_EQ(c.attention_dropout, 0.0);
  EXPECT_EQ(c.hidden_dropout, 0.0);
  EXPECT_EQ(c.loss_policy, defaults.loss_policy);
  EXPECT_EQ(c.trunk_policy, defaults.trunk_policy);
}

// Released configs may nest any field under dflash_config; the same value in both places is fine.
TEST(DrafterConfig, EveryFieldIsReadFromDflashConfig) {
  json j = read_json(kConfigs / "tiny.json");
  j["dflash_config"] = {{"temperature", 2.0}, {"block_size", j.at("block_size")}, {"sliding_window", 3}};
  j.erase("temperature");
  j.erase("sliding_window");
  const DrafterConfig c = drafter_config_from_json(j);
  EXPECT_EQ(c.temperature, 2.0);
  EXPECT_EQ(c.sliding_window, 3);
  EXPECT_EQ(c.block_size, j.at("block_size").get<std::int64_t>());
}

// The default values of the refused keys load (they describe exactly what SPEC §3 computes).
TEST(DrafterConfig, DefaultValuesOfRefusedKeysLoad) {
  json j = read_json(kConfigs / "tiny.json");
  j["rope_scaling"] = nullptr;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", j.at("rope_theta")}};
  j["attention_bias"] = false;
  j["hidden_act"] = "silu";
  j["use_sliding_window"] = true;
  j["loss_decay_gamma"] = nullptr;
  const DrafterConfig c = drafter_config_from_json(j);
  EXPECT_FALSE(c.loss_decay_gamma.has_value());
  EXPECT_TRUE(c.has_sliding_layer());
}

TEST(DrafterConfig, HeadDimAndKvHeadsDefaultLikeHuggingFace) {
  json j = read_json(kConfigs / "tiny.json");
  j.erase("head_dim");
  j.erase("num_key_value_heads");
  const DrafterConfig c = drafter_config_from_json(j);
  EXPECT_EQ(c.head_dim, c.hidden_size / c.num_attention_heads);
  EXPECT_EQ(c.num_key_value_heads, c.num_attention_heads);
}

TEST(DrafterConfig, JsonRoundTripKeepsEveryField) {
  DrafterConfig c = load_drafter_config(kConfigs / "tiny.json");
  c.loss_decay_gamma.reset();
  c.seed = 0xFFFFFFFFFFFFFFFFull;
  c.trunk_policy = TrunkPolicy::every_k;
  c.checkpoint_every = 3;
  EXPECT_FALSE(drafter_config_to_json(c).contains("num_target_layers"));  // unknown stays unknown
  c.num_target_layers = 4;
  const json j = drafter_config_to_json(c);
  EXPECT_EQ(drafter_config_to_json(drafter_config_from_json(j)), j);
  EXPECT_TRUE(j.at("loss_decay_gamma").is_null());
  EXPECT_EQ(j.at("num_target_layers"), 4);
}

struct BadField {
  std::string name;
  std::function<void(json&)> edit;
  std::string field;  // must appear in the message
  std::string value;  // must appear in the message
};

class DrafterConfigRejects : public ::testing::TestWithParam<BadField> {};

TEST_P(DrafterConfigRejects, NamingFieldValueAndFile) {
  json j = read_json(kConfigs / "tiny.json");
  GetParam().edit(j);
  EXPECT_THAT(error_of(j, "tiny.json"),
              AllOf(HasSubstr("invalid " + GetParam().field), HasSubstr(GetParam().value), HasSubstr("tiny.json")));
}

INSTANTIATE_TEST_SUITE_P(
    BadFields, DrafterConfigRejects,
    ::testing::Values(
        BadField{"kv_heads_not_dividing", [](json& j) { j["num_key_value_heads"] = 3; }, "num_key_value_heads", "3"},
        BadField{"odd_head_dim", [](json& j) { j["head_dim"] = 5; }, "head_dim", "5"},
        BadField{"block_size_1", [](json& j) { j["block_size"] = 1; }, "block_size", "1"},
        BadField{"too_few_layer_types", [](json& j) { j["layer_types"] = {"full_attention"}; }, "layer_types",
                 "1 entries"},
        BadField{"unknown_layer_type", [](json& j) { j["layer_types"][1] = "local"; }, "layer_types[1]", "local"},
        BadField{"sliding_window_0", [](json& j) { j["sliding_window"] = 0; }, "sliding_window", "0"},
        BadField{"sliding_window_missing", [](json& j) { j["sliding_window"] = nullptr; }, "sliding_window", "missing"},
        BadField{"attention_dropout_1", [](json& j) { j["attention_dropout"] = 1.0; }, "attention_dropout", "1"},
        BadField{"hidden_dropout_negative", [](json& j) { j["hidden_dropout"] = -0.25; }, "hidden_dropout", "-0.25"},
        BadField{"mask_token_is_vocab", [](json& j) { j["mask_token_id"] = 64; }, "mask_token_id", "64"},
        BadField{"vocab_0", [](json& j) { j["vocab_size"] = 0; }, "vocab_size", "0"},
        BadField{"hidden_size_string", [](json& j) { j["hidden_size"] = "16"; }, "hidden_size", "\"16\""},
        BadField{"hidden_size_missing", [](json& j) { j.erase("hidden_size"); }, "hidden_size", "missing"},
        BadField{"no_target_layers", [](json& j) { j["target_layer_ids"] = json::array(); }, "target_layer_ids",
                 "empty"},
        BadField{"negative_target_layer", [](json& j) { j["target_layer_ids"][1] = -2; }, "target_layer_ids[1]", "-2"},
        // num_target_layers is the target's depth (SGLang's meaning), not K: every id lies below it.
        BadField{"target_layer_at_the_target_depth", [](json& j) { j["num_target_layers"] = 3; }, "target_layer_ids[1]",
                 "3 is not below num_target_layers = 3"},
        BadField{"nested_target_layer_beyond_depth",
                 [](json& j) {
                   j["dflash_config"] = {{"num_target_layers", 2}};
                 },
                 "target_layer_ids[1]", "3 is not below num_target_layers = 2"},
        BadField{"num_target_layers_0", [](json& j) { j["num_target_layers"] = 0; }, "num_target_layers", "0"},
        BadField{"num_target_layers_bool", [](json& j) { j["num_target_layers"] = true; }, "num_target_layers",
                 "true is not an integer"},
        BadField{"unknown_loss_policy", [](json& j) { j["loss_policy"] = "stream"; }, "loss_policy", "stream"},
        BadField{"unknown_trunk_policy", [](json& j) { j["trunk_policy"] = "sometimes"; }, "trunk_policy", "sometimes"},
        BadField{"checkpoint_every_0", [](json& j) { j["checkpoint_every"] = 0; }, "checkpoint_every", "0"},
        BadField{"max_anchors_0", [](json& j) { j["max_anchors"] = 0; }, "max_anchors", "0"},
        BadField{"gamma_0", [](json& j) { j["loss_decay_gamma"] = 0.0; }, "loss_decay_gamma", "0"},
        BadField{"temperature_0", [](json& j) { j["temperature"] = 0.0; }, "temperature", "0"},
        BadField{"negative_hard_weight", [](json& j) { j["hard_weight"] = -1.5; }, "hard_weight", "-1.5"},
        BadField{"eps_0", [](json& j) { j["rms_norm_eps"] = 0.0; }, "rms_norm_eps", "0"},
        BadField{"too_many_layers",
                 [](json& j) {
                   j["num_hidden_layers"] = 256;
                   j["layer_types"] = std::vector<std::string>(256, "full_attention");
                 },
                 "num_hidden_layers", "256"},
        BadField{"negative_seed", [](json& j) { j["seed"] = -1; }, "seed", "-1"},
        BadField{"loss_chunk_rows_0", [](json& j) { j["loss_chunk_rows"] = 0; }, "loss_chunk_rows", "0"},
        BadField{"sliding_without_layer_types",
                 [](json& j) {
                   j.erase("layer_types");
                   j["use_sliding_window"] = true;
                 },
                 "layer_types", "use_sliding_window"},
        BadField{"nested_mask_token_disagrees",
                 [](json& j) {
                   j["dflash_config"] = {{"mask_token_id", 5}};
                 },
                 "mask_token_id", "63 at the top level disagrees with 5 in dflash_config"},
        BadField{"nested_training_field_disagrees",
                 [](json& j) {
                   j["dflash_config"] = {{"temperature", 2.0}};
                 },
                 "temperature", "1.0 at the top level disagrees with 2.0 in dflash_config"},
        BadField{"nested_bad_value",
                 [](json& j) {
                   j["dflash_config"] = {{"loss_decay_gamma", -3.0}};
                 },
                 "loss_decay_gamma", "-3"},
        BadField{"gamma_negative", [](json& j) { j["loss_decay_gamma"] = -2.5; }, "loss_decay_gamma", "-2.5"},
        // Keys whose non-default value this implementation would silently mis-model (TRAINING §16).
        BadField{"rope_scaling_yarn", [](json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; },
                 "rope_scaling", "\"yarn\""},
        BadField{"rope_parameters_yarn",
                 [](json& j) { j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}}; },
                 "rope_parameters.rope_type", "\"yarn\""},
        BadField{"attention_bias_true", [](json& j) { j["attention_bias"] = true; }, "attention_bias", "true"},
        BadField{"hidden_act_gelu", [](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act", "\"gelu\""},
        BadField{"is_causal_present", [](json& j) { j["is_causal"] = false; }, "is_causal", "false is present"},
        BadField{"dflash_config_causal_present", [](json& j) { j["dflash_config"] = {{"causal", true}}; },
                 "dflash_config.causal", "true is present"},
        // Issue 22, classes 2 and 5: products of sizes that do not fit 64 bits wrapped (data synth wrote
        // past a short vector; plan printed fc = 0 parameters at hidden_size 2^32, K = 1).
        BadField{"hidden_size_2_62", [](json& j) { j["hidden_size"] = std::int64_t(1) << 62; }, "hidden_size",
                 "4611686018427387904"},
        BadField{"vocab_size_2_62", [](json& j) { j["vocab_size"] = std::int64_t(1) << 62; }, "vocab_size",
                 "4611686018427387904 x 16"},
        BadField{"fc_of_hidden_size_2_32_one_target_layer",
                 [](json& j) {
                   j["hidden_size"] = std::int64_t(1) << 32;
                   j["target_layer_ids"] = {1};
                 },
                 "hidden_size", "4294967296 x 4294967296 values (fc.weight"},
        BadField{"intermediate_size_2_62", [](json& j) { j["intermediate_size"] = std::int64_t(1) << 62; },
                 "intermediate_size", "4611686018427387904 x 16"},
        BadField{"layers_times_layer_size",
                 [](json& j) {
                   j["hidden_size"] = std::int64_t(1) << 20;
                   j["intermediate_size"] = std::int64_t(1) << 38;
                 },
                 "num_hidden_layers", "values"},
        BadField{"no_sliding_window_with_sliding_layers", [](json& j) { j["use_sliding_window"] = false; },
                 "use_sliding_window", "false while layer_types lists sliding_attention"}),
    [](const auto& info) { return info.param.name; });

TEST(DrafterConfig, FileErrorsNameTheFile) {
  const std::filesystem::path missing = std::filesystem::temp_directory_path() / "dflash-no-such-config.json";
  EXPECT_THAT([&] { load_drafter_config(missing); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("dflash-no-such-config.json")));
  const std::filesystem::path broken = std::filesystem::temp_directory_path() / "dflash-broken-config.json";
  std::ofstream(broken) << "{ \"hidden_size\": 16,";
  EXPECT_THAT([&] { load_drafter_config(broken); },
              ::testing::ThrowsMessage<InputError>(AllOf(HasSubstr("dflash-broken-config.json"), HasSubstr("JSON"))));
  std::filesystem::remove(broken);
}

// Issue 22, class 16: a key given twice in one object was read as the last one, silently.
TEST(DrafterConfig, DuplicateKeyIsRefusedNamingItAndTheFile) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "dflash-duplicate-key-config.json";
  std::string text = read_json(kConfigs / "tiny.json").dump(1);
  text.insert(text.find('{') + 1, "\"block_size\": 2,");
  std::ofstream(path) << text;
  EXPECT_THAT([&] { load_drafter_config(path); },
              ::testing::ThrowsMessage<InputError>(
                  AllOf(HasSubstr("dflash-duplicate-key-config.json"), HasSubstr("duplicate key 'block_size'"))));
  std::filesystem::remove(path);
}

// Issue 22, class 3: a config that is a FIFO hung the read; a link to /dev/zero filled memory.
TEST(DrafterConfig, ConfigThatIsNotARegularFileIsRefusedNamingIt) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "dflash-config-kinds";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir / "fifo.json").c_str(), 0644), 0);
  std::filesystem::create_symlink("/dev/zero", dir / "zero.json");
  EXPECT_THAT([&] { load_drafter_config(dir / "fifo.json"); },
              ::testing::ThrowsMessage<InputError>(HasSubstr((dir / "fifo.json").string() + ": is a FIFO")));
  EXPECT_THAT(
      [&] { load_drafter_config(dir / "zero.json"); },
      ::testing::ThrowsMessage<InputError>(HasSubstr((dir / "zero.json").string() + ": is a character device")));
  std::filesystem::remove_all(dir);
}

// A number beyond a double's range is valid JSON grammar that nlohmann refuses with out_of_range, not
// parse_error (found by fuzz/config): it must still be the file's InputError, not an unknown exception.
TEST(DrafterConfig, NumberBeyondDoubleRangeIsAnErrorNamingTheFile) {
  const std::filesystem::path huge = std::filesystem::temp_directory_path() / "dflash-huge-number-config.json";
  std::ofstream(huge) << "{ \"rms_norm_eps\": 1e999 }";
  EXPECT_THAT([&] { load_drafter_config(huge); }, ::testing::ThrowsMessage<InputError>(AllOf(
                                                      HasSubstr("dflash-huge-number-config.json"), HasSubstr("JSON"))));
  std::filesystem::remove(huge);
}

TEST(DrafterConfig, CodeBuiltConfigsAreValidatedToo) {
  DrafterConfig c = load_drafter_config(kConfigs / "tiny.json");
  c.num_key_value_heads = 3;
  EXPECT_THAT([&] { validate_drafter_config(c); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("num_key_value_heads in config: 3")));
}

}  // namespace
}  // namespace dflash
