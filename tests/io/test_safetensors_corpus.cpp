// The fuzzer's seed corpus (fuzz/safetensors/corpus, made by fuzz/safetensors/make_corpus.py) is what its
// names say: valid_* files are accepted, bad_* files rejected, convert_* files accepted but
// refused on conversion. Seeds that drifted from their purpose would quietly weaken the fuzzing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "io/safetensors.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash::safetensors {
namespace {

TEST(SafetensorsFuzzCorpus, SeedsAreWhatTheirNamesSay) {
  const std::filesystem::path corpus = DFLASH_FUZZ_CORPUS_DIR;
  int valid = 0;
  int bad = 0;
  int convert = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("valid_")) {
      const Reader reader = Reader::open_file(entry.path());
      for (const std::string& tensor : reader.names()) EXPECT_NO_THROW(reader.doubles(tensor)) << name << " " << tensor;
      ++valid;
    } else if (name.starts_with("bad_")) {
      EXPECT_THROW(Reader::open_file(entry.path()), dflash::InputError) << name;
      ++bad;
    } else if (name.starts_with("convert_")) {
      const Reader reader = Reader::open_file(entry.path());
      bool refused = false;
      for (const std::string& tensor : reader.names()) {
        try {
          reader.doubles(tensor);
        } catch (const dflash::InputError&) {
          refused = true;
        }
      }
      EXPECT_TRUE(refused) << name;
      ++convert;
    } else {
      ADD_FAILURE() << "seed " << name << " is neither valid_, bad_ nor convert_";
    }
  }
  EXPECT_GE(valid, 4);
  EXPECT_GE(bad, 15);
  EXPECT_GE(convert, 1);
}

TEST(SafetensorsFuzzCorpus, AllDtypesSeedReadsBackItsValues) {
  const Reader reader =
      Reader::open_file(std::filesystem::path(DFLASH_FUZZ_CORPUS_DIR) / "valid_all_dtypes.safetensors");
  EXPECT_EQ(reader.int64s("d"), std::vector<std::int64_t>{-9});
  EXPECT_EQ(reader.doubles("z"), std::vector<double>{0.25});
  EXPECT_EQ(reader.int64s("c"), std::vector<std::int64_t>{7});
  EXPECT_EQ(reader.doubles("b"), std::vector<double>{1.5});
  EXPECT_EQ(reader.doubles("e"), std::vector<double>{0.5});
  EXPECT_EQ(reader.int64s("a"), (std::vector<std::int64_t>{1, 255}));
  EXPECT_EQ(reader.int64s("f"), std::vector<std::int64_t>{1});
  EXPECT_EQ(reader.metadata().at("config"), R"({"hidden_size": 8})");
}

}  // namespace
}  // namespace dflash::safetensors
