// Hugging Face checkpoints: a sharded one (index + shards) and a single file load by tensor name;
// every way the index can point wrong is refused when opening, naming the index and the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "io/hf_checkpoint.hpp"
#include "io/safetensors.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash {
namespace {

using safetensors::Dtype;
using safetensors::testing::input_error_message;
using safetensors::testing::ScratchDirectory;
using safetensors::testing::write_whole_file;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";

// Two shards: embed_tokens and layer 0 in the first, lm_head in the second.
void write_two_shards(const ScratchDirectory& directory) {
  safetensors::Writer first;
  first.add_floats("model.embed_tokens.weight", Dtype::BF16, {2, 2}, std::vector<double>{1, 2, 3, 4});
  first.add_floats("model.layers.0.input_layernorm.weight", Dtype::F32, {2}, std::vector<double>{1, 1});
  first.set_metadata("format", "pt");
  first.write_file(directory / kShard1);
  safetensors::Writer second;
  second.add_floats("lm_head.weight", Dtype::BF16, {2, 2}, std::vector<double>{-1, -2, -3, -4});
  second.set_metadata("format", "pt");
  second.write_file(directory / kShard2);
}

std::string index_json(const std::string& weight_map_entries) {
  return R"({"metadata": {"total_size": 24}, "weight_map": {)" + weight_map_entries + "}}";
}

const std::string kValidEntries = std::string(R"("lm_head.weight": ")") + kShard2 + R"(", )" +
                                  R"("model.embed_tokens.weight": ")" + kShard1 + R"(", )" +
                                  R"("model.layers.0.input_layernorm.weight": ")" + kShard1 + R"(")";

TEST(HfCheckpoint, ShardedCheckpointLoadsByName) {
  ScratchDirectory directory;
  write_two_shards(directory);
  write_whole_file(directory / kHfIndexFileName, index_json(kValidEntries));

  for (const auto& path : {directory.path(), directory / kHfIndexFileName}) {
    const HfCheckpoint checkpoint = HfCheckpoint::open(path);
    EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                                            "model.layers.0.input_layernorm.weight"}));
    EXPECT_THAT(checkpoint.doubles("model.embed_tokens.weight"), ElementsAreArray(std::vector<double>{1, 2, 3, 4}));
    EXPECT_THAT(checkpoint.doubles("lm_head.weight"), ElementsAreArray(std::vector<double>{-1, -2, -3, -4}));
    EXPECT_EQ(checkpoint.info("lm_head.weight").shape, (safetensors::Shape{2, 2}));
    EXPECT_EQ(checkpoint.info("lm_head.weight").dtype, Dtype::BF16);
    EXPECT_EQ(checkpoint.tensor("model.layers.0.input_layernorm.weight").info.dtype, Dtype::F32);
    EXPECT_EQ(checkpoint.shard_of("lm_head.weight"), kShard2);
    EXPECT_EQ(checkpoint.index_metadata().at("total_size"), 24);
    EXPECT_TRUE(checkpoint.contains("lm_head.weight"));
    EXPECT_FALSE(checkpoint.contains("model.norm.weight"));
    EXPECT_THAT(input_error_message([&] { checkpoint.tensor("model.norm.weight"); }),
                HasSubstr("no tensor named 'model.norm.weight'"));
  }
}

// `--target model` (relative, as users type it): the shards are next to the index, not in the
// working directory, which may hold another model's shards of the same names.
TEST(HfCheckpoint, RelativePathsFindTheShardsBesideTheIndex) {
  ScratchDirectory directory;
  std::filesystem::create_directories(directory / "model");
  std::filesystem::create_directories(directory / "other");
  safetensors::Writer shard;
  shard.add_floats("lm_head.weight", Dtype::F32, {2}, std::vector<double>{7, 8});
  shard.write_file(directory / "model" / kShard1);
  safetensors::Writer decoy;  // same name, in the working directory: must not be read
  decoy.add_floats("lm_head.weight", Dtype::F32, {2}, std::vector<double>{-7, -8});
  decoy.write_file(directory / "other" / kShard1);
  write_whole_file(directory / "model" / kHfIndexFileName,
                   index_json(std::string(R"("lm_head.weight": ")") + kShard1 + R"(")"));
  struct RestoreWorkingDirectory {
    std::filesystem::path path = std::filesystem::current_path();
    ~RestoreWorkingDirectory() { std::filesystem::current_path(path); }
  } restore;
  std::filesystem::current_path(directory / "other");
  for (const std::filesystem::path& relative :
       {std::filesystem::path("../model"), std::filesystem::path("../model") / kHfIndexFileName}) {
    EXPECT_THAT(HfCheckpoint::open(relative).doubles("lm_head.weight"), ElementsAreArray(std::vector<double>{7, 8}))
        << relative;
  }
}

TEST(HfCheckpoint, SingleFileCheckpoint) {
  ScratchDirectory directory;
  safetensors::Writer writer;
  writer.add_floats("norm.weight", Dtype::F32, {3}, std::vector<double>{1, 2, 3});
  writer.write_file(directory / kHfSingleFileName);
  for (const auto& path : {directory.path(), directory / kHfSingleFileName}) {
    const HfCheckpoint checkpoint = HfCheckpoint::open(path);
    EXPECT_EQ(checkpoint.names(), std::vector<std::string>{"norm.weight"});
    EXPECT_THAT(checkpoint.doubles("norm.weight"), ElementsAreArray(std::vector<double>{1, 2, 3}));
    EXPECT_TRUE(checkpoint.index_metadata().empty());
  }
}

TEST(HfCheckpoint, DirectoryWithoutCheckpoint) {
  ScratchDirectory directory;
  EXPECT_THAT(input_error_message([&] { HfCheckpoint::open(directory.path()); }),
              HasSubstr("directory has neither model.safetensors.index.json nor model.safetensors"));
}

TEST(HfCheckpoint, MissingShard) {
  ScratchDirectory directory;
  write_two_shards(directory);
  std::filesystem::remove(directory / kShard2);
  const auto index = directory / kHfIndexFileName;
  write_whole_file(index, index_json(kValidEntries));
  const std::string message = input_error_message([&] { HfCheckpoint::open(directory.path()); });
  EXPECT_THAT(message, HasSubstr(index.string() + ": shard '" + kShard2 + "' does not exist in "));
}

TEST(HfCheckpoint, TensorNotInItsShard) {
  ScratchDirectory directory;
  write_two_shards(directory);
  write_whole_file(directory / kHfIndexFileName,
                   index_json(kValidEntries + R"(, "model.norm.weight": ")" + kShard2 + R"(")"));
  EXPECT_THAT(input_error_message([&] { HfCheckpoint::open(directory.path()); }),
              HasSubstr(std::string("tensor 'model.norm.weight' is mapped to shard '") + kShard2 +
                        "' but that shard has no tensor named 'model.norm.weight'"));
}

TEST(HfCheckpoint, TensorMappedToTheWrongShard) {
  ScratchDirectory directory;
  write_two_shards(directory);
  write_whole_file(directory / kHfIndexFileName, index_json(std::string(R"("lm_head.weight": ")") + kShard1 + R"(")"));
  EXPECT_THAT(input_error_message([&] { HfCheckpoint::open(directory.path()); }),
              HasSubstr("tensor 'lm_head.weight' is mapped to shard"));
}

TEST(HfCheckpoint, ShardNameEscapingTheDirectory) {
  ScratchDirectory directory;
  write_two_shards(directory);
  std::filesystem::create_directories(directory / "sub");
  // The escaping shard exists and is valid: the refusal is about the name, not the file.
  safetensors::Writer outside;
  outside.add_floats("lm_head.weight", Dtype::F32, {1}, std::vector<double>{1});
  outside.write_file(directory.path().parent_path() / "escaped.safetensors");
  for (const std::string shard : {"../escaped.safetensors", "/etc/passwd", "sub/x.safetensors", "..", "."}) {
    write_whole_file(directory / kHfIndexFileName, index_json(R"("lm_head.weight": ")" + shard + R"(")"));
    EXPECT_THAT(input_error_message([&] { HfCheckpoint::open(directory.path()); }),
                HasSubstr("shard '" + shard + "' of tensor 'lm_head.weight' is not a plain file name"))
        << shard;
  }
  std::filesystem::remove(directory.path().parent_path() / "escaped.safetensors");
}

TEST(HfCheckpoint, MalformedIndex) {
  ScratchDirectory directory;
  write_two_shards(directory);
  const auto index = directory / kHfIndexFileName;
  const auto message_for = [&](const std::string& text) {
    write_whole_file(index, text);
    return input_error_message([&] { HfCheckpoint::open_index(index); });
  };
  EXPECT_THAT(message_for("{\"weight_map\": "), HasSubstr(index.string() + ": invalid JSON"));
  EXPECT_THAT(message_for("[]"), HasSubstr("is an array, not a JSON object"));
  EXPECT_THAT(message_for(R"({"metadata": {}})"), HasSubstr("missing \"weight_map\""));
  EXPECT_THAT(message_for(R"({"weight_map": []})"), HasSubstr("\"weight_map\" is an array, not an object"));
  EXPECT_THAT(message_for(R"({"weight_map": {}})"), HasSubstr("\"weight_map\" maps no tensors"));
  EXPECT_THAT(message_for(R"({"metadata": 3, "weight_map": {"a": "x"}})"), HasSubstr("\"metadata\" is an integer"));
  EXPECT_THAT(message_for(R"({"weight_map": {"lm_head.weight": 2}})"),
              HasSubstr("weight_map entry 'lm_head.weight' is an integer, not a shard file name"));
  // A tensor listed twice could silently go to either shard.
  EXPECT_THAT(message_for(index_json(std::string(R"("lm_head.weight": ")") + kShard2 + R"(", "lm_head.weight": ")" +
                                     kShard1 + R"(")")),
              HasSubstr("duplicate key 'lm_head.weight'"));
}

TEST(HfCheckpoint, MalformedShardIsReportedByItsPath) {
  ScratchDirectory directory;
  write_two_shards(directory);
  write_whole_file(directory / kShard2, safetensors::testing::bytes_of({1, 2, 3}));
  write_whole_file(directory / kHfIndexFileName, index_json(kValidEntries));
  EXPECT_THAT(input_error_message([&] { HfCheckpoint::open(directory.path()); }),
              HasSubstr((directory / kShard2).string() + ": file is 3 bytes"));
}

TEST(HfCheckpoint, PlainFileNames) {
  EXPECT_TRUE(is_plain_file_name("model-00001-of-00002.safetensors"));
  EXPECT_TRUE(is_plain_file_name("..weird but plain"));
  EXPECT_FALSE(is_plain_file_name(""));
  EXPECT_FALSE(is_plain_file_name("."));
  EXPECT_FALSE(is_plain_file_name(".."));
  EXPECT_FALSE(is_plain_file_name("../x"));
  EXPECT_FALSE(is_plain_file_name("a/b"));
  EXPECT_FALSE(is_plain_file_name("a\\b"));
  EXPECT_FALSE(is_plain_file_name(std::string_view("a\0b", 3)));
}

}  // namespace
}  // namespace dflash
