// The golden file format (SPEC §9): exactly the SPEC's metadata and tensor names, dtypes and
// shapes; metadata and config round trips; deterministic bytes; and every malformed golden
// rejected with a message naming the file and the problem.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "golden/check.hpp"
#include "tests/golden/golden_test_support.hpp"

namespace dflash {
namespace {

using golden_testing::generated_bytes;
using golden_testing::RawFile;
using golden_testing::ScratchDirectory;
using golden_testing::write_raw;
using safetensors::Dtype;
using ::testing::HasSubstr;

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const GoldenCase& c : golden_cases()) names.push_back(c.name);
  return names;
}

// SPEC §9's list, spelled out here rather than taken from golden_tensor_specs.
std::set<std::string> spec_tensor_names(const DrafterConfig& config) {
  std::set<std::string> names{"input/tokens",
                              "input/loss_mask",
                              "input/target_features",
                              "input/teacher_hidden",
                              "input/anchors",
                              "input/keep",
                              "frozen/embed_tokens.weight",
                              "frozen/lm_head.weight",
                              "output/loss",
                              "output/ce",
                              "output/kl",
                              "output/accuracy",
                              "output/weight_sum",
                              "output/hidden",
                              "output/lse",
                              "output/token_loss",
                              "output/weights"};
  for (const ParameterShape& p : drafter_parameter_shapes(config)) {
    names.insert("param/" + p.name);
    names.insert("grad/" + p.name);
  }
  return names;
}

class GoldenFileOfCase : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenFileOfCase, HoldsExactlyTheSpecTensorsWithTheirDtypesAndShapes) {
  const GoldenCase& c = golden_case(GetParam());
  const safetensors::Reader reader = safetensors::Reader::from_bytes(generated_bytes(c.name));
  const std::vector<std::string> names = reader.names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), spec_tensor_names(c.config));

  const std::int64_t nseq = c.batch.sequences, S = c.batch.context_length, N = c.config.max_anchors;
  const std::int64_t T = N * c.config.block_size, H = c.config.hidden_size, V = c.config.vocab_size;
  for (const std::string& name : names) {
    const bool integer =
        name == "input/tokens" || name == "input/loss_mask" || name == "input/anchors" || name == "input/keep";
    EXPECT_EQ(reader.info(name).dtype, integer ? Dtype::I64 : Dtype::F64) << name;
  }
  EXPECT_EQ(reader.info("input/tokens").shape, (safetensors::Shape{nseq, S}));
  EXPECT_EQ(reader.info("input/target_features").shape, (safetensors::Shape{nseq, S, c.config.feature_width()}));
  EXPECT_EQ(reader.info("input/teacher_hidden").shape, (safetensors::Shape{nseq, S, H}));
  EXPECT_EQ(reader.info("input/anchors").shape, (safetensors::Shape{nseq, N}));
  EXPECT_EQ(reader.info("frozen/lm_head.weight").shape, (safetensors::Shape{V, H}));
  for (const char* scalar : {"output/loss", "output/ce", "output/kl", "output/accuracy", "output/weight_sum"}) {
    EXPECT_EQ(reader.info(scalar).shape, safetensors::Shape{}) << scalar;
  }
  EXPECT_EQ(reader.info("output/hidden").shape, (safetensors::Shape{nseq, T, H}));
  for (const char* rows : {"output/lse", "output/token_loss", "output/weights"}) {
    EXPECT_EQ(reader.info(rows).shape, (safetensors::Shape{nseq, T})) << rows;
  }
  for (const ParameterShape& p : drafter_parameter_shapes(c.config)) {
    EXPECT_EQ(reader.info("param/" + p.name).shape, p.shape) << p.name;
    EXPECT_EQ(reader.info("grad/" + p.name).shape, p.shape) << p.name;
  }
}

TEST_P(GoldenFileOfCase, MetadataIsExactlyTheSpecKeys) {
  const GoldenCase& c = golden_case(GetParam());
  const safetensors::Metadata m = safetensors::Reader::from_bytes(generated_bytes(c.name)).metadata();
  std::set<std::string> keys;
  for (const auto& [key, value] : m) keys.insert(key);
  EXPECT_EQ(keys, (std::set<std::string>{"format", "version", "case", "config", "seed", "step"}));
  EXPECT_EQ(m.at("format"), "dflash-golden");
  EXPECT_EQ(m.at("version"), "1");
  EXPECT_EQ(m.at("case"), c.name);
  EXPECT_EQ(m.at("seed"), std::to_string(c.config.seed));
  EXPECT_EQ(m.at("step"), std::to_string(c.step));
}

TEST_P(GoldenFileOfCase, ConfigRoundTripsThroughTheMetadataWithItsTrainingFields) {
  const GoldenCase& c = golden_case(GetParam());
  const safetensors::Metadata m = safetensors::Reader::from_bytes(generated_bytes(c.name)).metadata();
  const nlohmann::json stored = nlohmann::json::parse(m.at("config"));
  const DrafterConfig back = drafter_config_from_json(stored, "metadata");
  EXPECT_EQ(drafter_config_to_json(back), drafter_config_to_json(c.config));
  // The training fields a recomputation needs are there, not left to defaults.
  for (const char* field :
       {"max_anchors", "loss_decay_gamma", "hard_weight", "soft_weight", "temperature", "attention_dropout",
        "hidden_dropout", "seed", "loss_chunk_rows", "loss_policy", "trunk_policy", "checkpoint_every"}) {
    EXPECT_TRUE(stored.contains(field)) << field;
  }
  EXPECT_EQ(back.seed, c.config.seed);
  EXPECT_EQ(back.temperature, c.config.temperature);
  EXPECT_EQ(back.loss_decay_gamma, c.config.loss_decay_gamma);
  EXPECT_EQ(back.attention_dropout, c.config.attention_dropout);
  EXPECT_EQ(back.trunk_policy, c.config.trunk_policy);
  EXPECT_EQ(back.loss_policy, c.config.loss_policy);

  // The same text as a config.json file loads too.
  ScratchDirectory dir;
  safetensors::testing::write_whole_file(dir / "config.json", std::string_view(m.at("config")));
  EXPECT_EQ(drafter_config_to_json(load_drafter_config(dir / "config.json")), drafter_config_to_json(c.config));
}

TEST_P(GoldenFileOfCase, WriteThenReadGivesBackEveryTensorBitwise) {
  const GoldenCase& c = golden_case(GetParam());
  const Golden generated = generate_golden(c);
  ScratchDirectory dir;
  write_golden(generated, dir / "g.safetensors");
  const Golden back = read_golden(dir / "g.safetensors");
  EXPECT_EQ(back.case_name, c.name);
  EXPECT_EQ(back.step, c.step);
  EXPECT_EQ(back.source, (dir / "g.safetensors").string());
  EXPECT_EQ(golden_metadata(back), golden_metadata(generated));
  for (const GoldenCheckRow& row : compare_goldens(generated, back, 0.0)) {
    EXPECT_EQ(row.error, 0.0) << row.tensor << ": " << row.note;
  }
  EXPECT_EQ(golden_bytes(back), golden_bytes(generated));
}

TEST_P(GoldenFileOfCase, SameCaseGivesTheSameBytes) {
  const GoldenCase& c = golden_case(GetParam());
  EXPECT_EQ(golden_bytes(generate_golden(c)), generated_bytes(c.name));
  ScratchDirectory dir;
  write_golden(generate_golden(c), dir / "g.safetensors");
  EXPECT_EQ(safetensors::testing::read_whole_file(dir / "g.safetensors"), generated_bytes(c.name));
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenFileOfCase, ::testing::ValuesIn(case_names()), [](const auto& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

TEST(GoldenCases, UnknownCaseIsNamedWithTheKnownOnes) {
  const std::string message = safetensors::testing::input_error_message([] { golden_case("no-such-case"); });
  EXPECT_THAT(message, HasSubstr("invalid golden case: 'no-such-case' is not one of: tiny-full, gqa-sliding"));
}

// ---- malformed goldens: one test per problem, each message names the file -----------------

class GoldenFileRejects : public ::testing::Test {
 protected:
  RawFile raw = RawFile::of(generated_bytes("holes-invalid"));
  ScratchDirectory dir;

  std::string error_of_edited() {
    const std::filesystem::path path = write_raw(dir, "edited.safetensors", raw);
    const std::string message = safetensors::testing::input_error_message([&] { read_golden(path); });
    EXPECT_THAT(message, HasSubstr(path.string()));
    return message;
  }
};

TEST_F(GoldenFileRejects, MissingFile) {
  const auto path = dir / "absent.safetensors";
  EXPECT_THAT(safetensors::testing::input_error_message([&] { read_golden(path); }),
              HasSubstr(path.string() + ": not a readable regular file"));
}

TEST_F(GoldenFileRejects, NotASafetensorsFile) {
  const auto path = dir / "text.safetensors";
  safetensors::testing::write_whole_file(path, std::string_view("hello, this is not a golden"));
  EXPECT_THAT(safetensors::testing::input_error_message([&] { read_golden(path); }), HasSubstr(path.string()));
}

TEST_F(GoldenFileRejects, FormatMetadataMissing) {
  raw.metadata.erase("format");
  EXPECT_THAT(error_of_edited(), HasSubstr("not a dflash golden: metadata 'format' is missing"));
}

TEST_F(GoldenFileRejects, PlainSafetensorsWithoutMetadata) {
  raw.metadata.clear();
  EXPECT_THAT(error_of_edited(), HasSubstr("not a dflash golden: metadata 'format' is missing"));
}

TEST_F(GoldenFileRejects, OtherFormat) {
  raw.metadata["format"] = "pt";
  EXPECT_THAT(error_of_edited(), HasSubstr("not a dflash golden: metadata 'format' is 'pt', expected 'dflash-golden'"));
}

TEST_F(GoldenFileRejects, UnsupportedVersion) {
  raw.metadata["version"] = "2";
  EXPECT_THAT(error_of_edited(), HasSubstr("metadata 'version' is '2'; this dflash reads version 1"));
}

TEST_F(GoldenFileRejects, VersionMissing) {
  raw.metadata.erase("version");
  EXPECT_THAT(error_of_edited(), HasSubstr("metadata 'version' is missing"));
}

TEST_F(GoldenFileRejects, UnknownMetadataKey) {
  raw.metadata["comment"] = "hand-edited";
  EXPECT_THAT(error_of_edited(), HasSubstr("metadata 'comment' is not a SPEC §9 golden key"));
}

TEST_F(GoldenFileRejects, CaseMissing) {
  raw.metadata.erase("case");
  EXPECT_THAT(error_of_edited(), HasSubstr("metadata 'case' is missing"));
}

TEST_F(GoldenFileRejects, CaseEmpty) {
  raw.metadata["case"] = "";
  EXPECT_THAT(error_of_edited(), HasSubstr("metadata 'case' is empty"));
}

TEST_F(GoldenFileRejects, ConfigMissing) {
  raw.metadata.erase("config");
  EXPECT_THAT(error_of_edited(), HasSubstr("metadata 'config' is missing"));
}

TEST_F(GoldenFileRejects, ConfigNotJson) {
  raw.metadata["config"] = "{\"hidden_size\": ";
  EXPECT_THAT(error_of_edited(), HasSubstr("(metadata 'config')"));
}

TEST_F(GoldenFileRejects, ConfigWithDuplicateKeys) {
  nlohmann::json j = nlohmann::json::parse(raw.metadata["config"]);
  std::string text = j.dump();
  text.insert(1, "\"hidden_size\":8,");
  raw.metadata["config"] = text;
  EXPECT_THAT(error_of_edited(), HasSubstr("(metadata 'config')"));
}

TEST_F(GoldenFileRejects, ConfigFieldInvalid) {
  nlohmann::json j = nlohmann::json::parse(raw.metadata["config"]);
  j["temperature"] = -1.0;
  raw.metadata["config"] = j.dump();
  EXPECT_THAT(error_of_edited(), HasSubstr("invalid temperature in "));
  EXPECT_THAT(error_of_edited(), HasSubstr("(metadata 'config'): -1 must be finite and > 0"));
}

TEST_F(GoldenFileRejects, SeedDisagreesWithTheConfig) {
  raw.metadata["seed"] = "12345";
  EXPECT_THAT(error_of_edited(), HasSubstr("metadata 'seed' = 12345 disagrees with the config's seed 505"));
}

TEST_F(GoldenFileRejects, SeedNotAnInteger) {
  raw.metadata["seed"] = "505.0";
  EXPECT_THAT(error_of_edited(), HasSubstr("metadata 'seed' = '505.0' is not an integer"));
}

TEST_F(GoldenFileRejects, StepNegative) {
  raw.metadata["step"] = "-1";
  EXPECT_THAT(error_of_edited(), HasSubstr("metadata 'step' = '-1' is not an integer in [0, 4294967295]"));
}

TEST_F(GoldenFileRejects, StepBeyond32Bits) {
  raw.metadata["step"] = "4294967296";
  EXPECT_THAT(error_of_edited(), HasSubstr("metadata 'step' = '4294967296' is not an integer in [0, 4294967295]"));
}

TEST_F(GoldenFileRejects, TensorMissing) {
  raw.tensors.erase("grad/layers.1.mlp.up_proj.weight");
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'grad/layers.1.mlp.up_proj.weight' is missing"));
}

TEST_F(GoldenFileRejects, TokensMissing) {
  raw.tensors.erase("input/tokens");
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'input/tokens' is missing"));
}

TEST_F(GoldenFileRejects, ExtraTensor) {
  raw.tensors["grad/input/target_features"] = raw.tensors.at("input/target_features");
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'grad/input/target_features' is not a SPEC §9 golden tensor"));
}

TEST_F(GoldenFileRejects, FloatTensorStoredAsF32) {
  golden_testing::RawTensor& t = raw.tensors.at("output/loss");
  t = {Dtype::F32, {}, std::vector<std::byte>(4)};
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'output/loss' has dtype F32, expected F64"));
}

TEST_F(GoldenFileRejects, IntegerTensorStoredAsF64) {
  raw.tensors.at("input/keep").dtype = Dtype::F64;
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'input/keep' has dtype F64, expected I64"));
}

TEST_F(GoldenFileRejects, ParameterOfTheWrongShape) {
  golden_testing::RawTensor& t = raw.tensors.at("param/norm.weight");
  t.shape = {4, 2};
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'param/norm.weight' has shape [4, 2], expected [8]"));
}

TEST_F(GoldenFileRejects, HiddenWithTheWrongNumberOfSequences) {
  golden_testing::RawTensor& t = raw.tensors.at("output/hidden");
  t.shape = {2, t.shape[1] * 2, t.shape[2]};
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'output/hidden' has shape [2, 32, 8], expected [4, 16, 8]"));
}

TEST_F(GoldenFileRejects, TokensNotAMatrix) {
  golden_testing::RawTensor& t = raw.tensors.at("input/tokens");
  t.shape = {t.shape[0] * t.shape[1]};
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'input/tokens' has shape [56], expected two dimensions"));
}

TEST_F(GoldenFileRejects, LossMaskValueNotAFlag) {
  raw.set_integer("input/loss_mask", 5, 256);
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'input/loss_mask' element 5 is 256, not 0 or 1"));
}

TEST_F(GoldenFileRejects, TokenOutsideTheVocabulary) {
  raw.set_integer("input/tokens", 14 + 3, 32);
  EXPECT_THAT(error_of_edited(), HasSubstr("invalid tokens[1][3]: 32 is outside [0, vocab_size = 32)"));
}

TEST_F(GoldenFileRejects, KeptAnchorsNotIncreasing) {
  raw.set_integer("input/anchors", 0, 13);
  raw.set_integer("input/keep", 0, 1);
  raw.set_integer("input/anchors", 1, 2);
  raw.set_integer("input/keep", 1, 1);
  EXPECT_THAT(error_of_edited(), HasSubstr("invalid anchors of sequence 0, anchor[1]: 2 is not greater than"));
}

TEST_F(GoldenFileRejects, NonFiniteParameter) {
  raw.set_float("param/fc.weight", 3, std::numeric_limits<double>::infinity());
  EXPECT_THAT(error_of_edited(), HasSubstr("invalid fc.weight: element 3 is inf"));
}

TEST_F(GoldenFileRejects, NonFiniteResult) {
  raw.set_float("output/kl", 0, std::numeric_limits<double>::quiet_NaN());
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'output/kl' element 0 is nan; results must be finite"));
}

TEST_F(GoldenFileRejects, InfiniteResult) {
  raw.set_float("output/kl", 0, -std::numeric_limits<double>::infinity());
  EXPECT_THAT(error_of_edited(), HasSubstr("tensor 'output/kl' element 0 is -inf; results must be finite"));
}

}  // namespace
}  // namespace dflash
