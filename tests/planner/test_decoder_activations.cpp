// The generic decoder-layer activation model: SPEC §8 worked example 2 to the byte, from the
// struct and from configs/decoder-example-64l.json, checkpoint arithmetic, and bad configs.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "planner/decoder_layer_activations.hpp"
#include "tests/planner/expect_input_error.hpp"
#include "tests/planner/source_configs.hpp"

namespace dflash {
namespace {

// SPEC §8: H 5120, q projection 12288 (24 heads of 256, doubled by the output gate), k and v 1024,
// attention output 6144, FFN 17408, 64 layers.
DecoderConfig decoder_spec_example() {
  return {.hidden_size = 5120,
          .intermediate_size = 17408,
          .num_attention_heads = 24,
          .num_key_value_heads = 4,
          .head_dim = 256,
          .num_hidden_layers = 64,
          .attn_output_gate = true};
}

void expect_spec_example_2(const DecoderConfig& config) {
  const std::vector<PerTokenTensor> layer = decoder_layer_saved_tensors(config);
  EXPECT_EQ(values_per_token(layer, kAttentionBlock), 35'840);
  EXPECT_EQ(values_per_token(layer, kMlpBlock), 62'464);
  const ActivationMemory m = decoder_activation_memory(config, 8192, 4, 2);
  EXPECT_EQ(m.values_per_token_per_layer, 98'304);
  EXPECT_EQ(m.all_layers_bytes, 103'079'215'104);
  EXPECT_EQ(m.all_layers_bytes, 96LL << 30);
  EXPECT_EQ(m.residual_only_bytes, 5LL << 30);
  EXPECT_EQ(m.boundary_bytes, 1'342'177'280);
  EXPECT_EQ(m.live_segment_bytes, 6'442'450'944);
  EXPECT_EQ(m.checkpointed_bytes, 1'342'177'280 + 6'442'450'944);
  EXPECT_EQ(m.checkpointed_bytes * 4, 29LL << 30);  // 7.25 GiB
}

TEST(DecoderActivations, SpecWorkedExampleToTheByte) { expect_spec_example_2(decoder_spec_example()); }

TEST(DecoderActivations, SpecWorkedExampleFromTheConfigFile) {
  expect_spec_example_2(load_decoder_config(source_dir() / "configs/decoder-example-64l.json"));
}

TEST(DecoderActivations, NineteenPointTwoTimesTheResidual) {
  const DecoderConfig c = decoder_spec_example();
  const ActivationMemory m = decoder_activation_memory(c, 8192, 4, 2);
  EXPECT_EQ(m.values_per_token_per_layer * 10, c.hidden_size * 192);
}

TEST(DecoderActivations, TheOutputGateOnlyWidensTheQueryProjection) {
  DecoderConfig gated = decoder_spec_example(), plain = decoder_spec_example();
  plain.attn_output_gate = false;
  const auto q = plain.num_attention_heads * plain.head_dim;
  EXPECT_EQ(values_per_token(decoder_layer_saved_tensors(gated)) - values_per_token(decoder_layer_saved_tensors(plain)),
            q);
  EXPECT_EQ(values_per_token(decoder_layer_saved_tensors(plain), kMlpBlock),
            values_per_token(decoder_layer_saved_tensors(gated), kMlpBlock));
}

TEST(DecoderActivations, CheckpointEveryLayerAndUnevenSegments) {
  DecoderConfig c = decoder_spec_example();
  c.num_hidden_layers = 5;
  const std::int64_t T = 100, b = 2, row = T * c.hidden_size * b, layer = T * 98'304 * b;
  const ActivationMemory every1 = decoder_activation_memory(c, T, 1, b);
  EXPECT_EQ(every1.boundary_bytes, 5 * row);
  EXPECT_EQ(every1.live_segment_bytes, layer);
  const ActivationMemory every2 = decoder_activation_memory(c, T, 2, b);  // boundaries at layers 0, 2, 4
  EXPECT_EQ(every2.boundary_bytes, 3 * row);
  EXPECT_EQ(every2.live_segment_bytes, 2 * layer);
  const ActivationMemory every9 = decoder_activation_memory(c, T, 9, b);  // one segment: the whole stack
  EXPECT_EQ(every9.boundary_bytes, row);
  EXPECT_EQ(every9.live_segment_bytes, every9.all_layers_bytes);
}

TEST(DecoderActivations, HeadDimAndKeyValueHeadsDefaultAsInHuggingFace) {
  const DecoderConfig c = decoder_config_from_json(
      {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_attention_heads", 8}, {"num_hidden_layers", 2}}, "test");
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_FALSE(c.attn_output_gate);
  // GQA: head_dim is hidden_size over the query heads, never over the key-value heads.
  const DecoderConfig gqa = decoder_config_from_json({{"hidden_size", 64},
                                                      {"intermediate_size", 128},
                                                      {"num_attention_heads", 8},
                                                      {"num_key_value_heads", 2},
                                                      {"num_hidden_layers", 2}},
                                                     "test");
  EXPECT_EQ(gqa.head_dim, 8);
  EXPECT_EQ(gqa.num_key_value_heads, 2);
}

TEST(DecoderActivations, ReadsANestedTextConfig) {
  const DecoderConfig c = decoder_config_from_json({{"text_config",
                                                     {{"hidden_size", 64},
                                                      {"intermediate_size", 128},
                                                      {"num_attention_heads", 8},
                                                      {"num_hidden_layers", 2},
                                                      {"attn_output_gate", true}}}},
                                                   "test");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_TRUE(c.attn_output_gate);
}

void expect_config_error(const nlohmann::json& j, const char* field) {
  expect_input_error([&] { decoder_config_from_json(j, "cfg.json"); }, {field, "cfg.json"});
}

nlohmann::json valid_json() {
  return {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_attention_heads", 8}, {"num_hidden_layers", 2}};
}

TEST(DecoderActivations, MissingFieldIsNamed) {
  nlohmann::json j = valid_json();
  j.erase("intermediate_size");
  expect_config_error(j, "intermediate_size");
}

TEST(DecoderActivations, NonIntegerFieldIsNamed) {
  nlohmann::json j = valid_json();
  j["hidden_size"] = 64.5;
  expect_config_error(j, "hidden_size");
}

TEST(DecoderActivations, ZeroLayersIsNamed) {
  nlohmann::json j = valid_json();
  j["num_hidden_layers"] = 0;
  expect_config_error(j, "num_hidden_layers");
}

TEST(DecoderActivations, NegativeHeadDimIsNamed) {
  nlohmann::json j = valid_json();
  j["head_dim"] = -4;
  expect_config_error(j, "head_dim");
}

TEST(DecoderActivations, KeyValueHeadsMustDivideHeads) {
  nlohmann::json j = valid_json();
  j["num_key_value_heads"] = 3;
  expect_config_error(j, "num_key_value_heads");
}

TEST(DecoderActivations, GateFlagMustBeBoolean) {
  nlohmann::json j = valid_json();
  j["attn_output_gate"] = "yes";
  expect_config_error(j, "attn_output_gate");
}

TEST(DecoderActivations, UnreadableFileIsNamed) {
  EXPECT_THROW(load_decoder_config("/nonexistent/config.json"), InputError);
  const auto path = std::filesystem::temp_directory_path() / "dflash_planner_bad.json";
  std::ofstream(path) << "{ not json";
  EXPECT_THROW(load_decoder_config(path), InputError);
  std::filesystem::remove(path);
}

TEST(DecoderActivations, ZeroTokensIsNamed) {
  expect_input_error([] { decoder_activation_memory(decoder_spec_example(), 0, 4, 2); }, {"tokens", "0"});
}

TEST(DecoderActivations, ZeroCheckpointIntervalIsNamed) {
  expect_input_error([] { decoder_activation_memory(decoder_spec_example(), 8192, 0, 2); }, {"checkpoint_every", "0"});
}

}  // namespace
}  // namespace dflash
