// Feature shards (TRAINING §14): a valid set reads back exactly through the maps, in file-name
// order, cut to max_context and counted; every malformed case is refused naming file, tensor and
// index.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "distributed/data/feature_dataset.hpp"
#include "tests/distributed/malformed_shards.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using ::testing::HasSubstr;

TEST(FeatureShards, SetReadsBackExactlyInFileNameOrder) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  const FeatureShardContents a = valid_shard(c, 3, 1), b = valid_shard(c, 2, 2);
  // "b" sorts before "c" by bytes; written in the other order to show order comes from names.
  write_feature_shard(dir / "c.safetensors", a, safetensors::Dtype::F32);
  write_feature_shard(dir / "b.safetensors", b, safetensors::Dtype::F32);
  write_whole_file(dir / "notes.txt", "not a shard");
  const FeatureDataset d = FeatureDataset::open(dir.path(), FeatureSetShape::of(c));
  ASSERT_EQ(d.num_shards(), 2);
  ASSERT_EQ(d.num_sequences(), 5);
  EXPECT_EQ(d.num_rows(), (3 + 4) + (3 + 4 + 5));
  // Sequence 2 is a's sequence 0 (3 rows); values are F32, and the writer's doubles round to F32.
  const FeatureSequence q = d.sequence(2, 100);
  EXPECT_FALSE(q.truncated);
  ASSERT_EQ(q.length(), 3);
  for (std::int64_t p = 0; p < 3; ++p) {
    EXPECT_EQ(q.tokens[std::size_t(p)], a.tokens[std::size_t(p)]);
    EXPECT_EQ(q.loss_mask[std::size_t(p)], a.loss_mask[std::size_t(p)]);
  }
  for (std::size_t e = 0; e < q.target_features.size(); ++e)
    EXPECT_EQ(q.target_features[e], double(float(a.target_features[e])));
  for (std::size_t e = 0; e < q.teacher_hidden.size(); ++e)
    EXPECT_EQ(q.teacher_hidden[e], double(float(a.teacher_hidden[e])));
  // Sequence 1 is b's sequence 1 (4 rows).
  EXPECT_EQ(d.sequence_length(1), 4);
  EXPECT_EQ(d.sequence(1, 100).tokens, std::vector<std::int64_t>(b.tokens.begin() + 3, b.tokens.begin() + 7));
}

// Every sequence of a set, every field, is the rows the writer was given at that sequence's offsets
// in its shard: a sequence past a shard's first, read from the shard's first rows, would train on
// another sequence's features and mask under its own tokens. Cut to max_context, its first rows.
TEST(FeatureShards, EverySequenceIsItsOwnRowsOfItsShard) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  const FeatureShardContents a = valid_shard(c, 3, 4), b = valid_shard(c, 2, 7);  // lengths 3, 4, 5 and 3, 4
  write_feature_shard(dir / "a.safetensors", a, safetensors::Dtype::F32);
  write_feature_shard(dir / "b.safetensors", b, safetensors::Dtype::F32);
  const FeatureDataset d = FeatureDataset::open(dir.path(), FeatureSetShape::of(c));
  ASSERT_EQ(d.num_sequences(), 5);
  const std::int64_t KH = c.feature_width(), H = c.hidden_size;
  for (const std::int64_t max_context : {std::int64_t(100), std::int64_t(4)}) {
    for (std::int64_t i = 0; i < d.num_sequences(); ++i) {
      const FeatureShardContents& s = i < 3 ? a : b;
      const std::int64_t local = i < 3 ? i : i - 3;
      const std::int64_t begin = s.offsets[std::size_t(local)];
      const std::int64_t rows = std::min(s.offsets[std::size_t(local + 1)] - begin, max_context);
      const FeatureSequence q = d.sequence(i, max_context);
      ASSERT_EQ(q.length(), rows) << i;
      for (std::int64_t p = 0; p < rows; ++p) {
        const auto r = std::size_t(begin + p);
        EXPECT_EQ(q.tokens[std::size_t(p)], s.tokens[r]) << i << " row " << p;
        EXPECT_EQ(q.loss_mask[std::size_t(p)], s.loss_mask[r]) << i << " row " << p;
        for (std::int64_t e = 0; e < KH; ++e) {
          ASSERT_EQ(q.target_features[std::size_t(p * KH + e)], double(float(s.target_features[r * KH + e])))
              << i << " row " << p;
        }
        for (std::int64_t e = 0; e < H; ++e) {
          ASSERT_EQ(q.teacher_hidden[std::size_t(p * H + e)], double(float(s.teacher_hidden[r * H + e])))
              << i << " row " << p;
        }
      }
    }
  }
}

// What a CUDA step's run reads (sequence_bf16_batch): for every dtype a shard may hold, every
// sequence, cut or not, F and G as the bits the upload's rounding (bf16_bits_of) makes
// of sequence_batch's doubles, the same tokens and mask, and no double F or G.
TEST(FeatureShards, Bf16ReadIsTheDoublesRoundedForEveryDtype) {
  const DrafterConfig c = tiny_config();
  for (const safetensors::Dtype dtype : {safetensors::Dtype::BF16, safetensors::Dtype::F16, safetensors::Dtype::F32}) {
    SCOPED_TRACE(std::string(safetensors::dtype_name(dtype)));
    ScratchDirectory dir;
    write_feature_shard(dir / "a.safetensors", valid_shard(c, 3, 4), dtype);  // lengths 3, 4, 5
    write_feature_shard(dir / "b.safetensors", valid_shard(c, 2, 9), dtype);
    const FeatureDataset d = FeatureDataset::open(dir.path(), FeatureSetShape::of(c));
    for (const std::int64_t max_context : {std::int64_t(100), std::int64_t(4)}) {
      for (std::int64_t i = 0; i < d.num_sequences(); ++i) {
        MemoryTracker tracker;
        const FeatureDataset::Batch want = d.sequence_batch(tracker, i, max_context);
        const FeatureDataset::Bf16Batch got = d.sequence_bf16_batch(tracker, i, max_context);
        EXPECT_EQ(got.truncated, want.truncated);
        EXPECT_EQ(got.original_length, want.original_length);
        EXPECT_EQ(got.batch.tokens.values(), want.batch.tokens.values()) << i;
        EXPECT_EQ(got.batch.loss_mask.values(), want.batch.loss_mask.values()) << i;
        EXPECT_EQ(got.batch.target_features.numel(), 0);
        EXPECT_EQ(got.batch.teacher_hidden.numel(), 0);
        const Tensor<double>& F = want.batch.target_features;
        const Tensor<double>& G = want.batch.teacher_hidden;
        ASSERT_EQ(got.features.target_features.shape(), F.shape());
        ASSERT_EQ(got.features.teacher_hidden.shape(), G.shape());
        EXPECT_EQ(got.features.target_features.values(), bf16_bits_of(F.data(), F.numel())) << i;
        EXPECT_EQ(got.features.teacher_hidden.values(), bf16_bits_of(G.data(), G.numel())) << i;
      }
    }
  }
}

// An F32 shard may hold a value past bf16's largest (3.3895e38): a CUDA step would compute with an
// infinity, so the read names the shard, its row and the element.
TEST(FeatureShards, Bf16ReadNamesAValueBeyondBf16sRange) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  FeatureShardContents a = valid_shard(c, 3, 4);  // lengths 3, 4, 5: sequence 1 is rows 3 to 6
  a.target_features[std::size_t(5 * c.feature_width() + 2)] = 3.4e38;
  write_feature_shard(dir / "a.safetensors", a, safetensors::Dtype::F32);
  const FeatureDataset d = FeatureDataset::open(dir.path(), FeatureSetShape::of(c));
  MemoryTracker tracker;
  EXPECT_NO_THROW(d.sequence_bf16_batch(tracker, 0, 100));
  EXPECT_NO_THROW(d.sequence_batch(tracker, 1, 100));  // finite: the reference reads it
  try {
    d.sequence_bf16_batch(tracker, 1, 100);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a.safetensors: target_features[5]"));
    EXPECT_THAT(e.what(), HasSubstr("element 2"));
    EXPECT_THAT(e.what(), HasSubstr("bf16's range"));
  }
}

TEST(FeatureShards, LongSequenceKeepsItsFirstMaxContextRowsAndIsCounted) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  const FeatureShardContents a = valid_shard(c, 3, 4);  // lengths 3, 4, 5
  write_feature_shard(dir / "a.safetensors", a, safetensors::Dtype::BF16);
  const FeatureDataset d = FeatureDataset::open(dir.path(), FeatureSetShape::of(c));
  const FeatureSequence q = d.sequence(2, 4);
  EXPECT_TRUE(q.truncated);
  EXPECT_EQ(q.original_length, 5);
  ASSERT_EQ(q.length(), 4);
  EXPECT_EQ(q.tokens, std::vector<std::int64_t>(a.tokens.begin() + 7, a.tokens.begin() + 11));
  EXPECT_EQ(q.target_features.size(), std::size_t(4 * c.feature_width()));
  EXPECT_FALSE(d.sequence(1, 4).truncated);  // exactly max_context rows
}

// Issue 22's class 4 at open: the whole-shard scan read the map unguarded, so a shard cut while it
// was being validated (before step 0) killed the run with SIGBUS. The scan is a guarded copy: the
// cut is an InputError naming the file and its sizes.
TEST(FeatureShards, ShardCutWhileItsValuesAreCheckedIsAnErrorNamingIt) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  const std::filesystem::path path = dir / "a.safetensors";
  write_feature_shard(path, valid_shard(c, 2, 5), safetensors::Dtype::F32);
  const FeatureShard shard = FeatureShard::open(path, FeatureSetShape::of(c), /*read_every_value=*/false);
  EXPECT_NO_THROW(shard.check_every_value(FeatureSetShape::of(c)));
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, 0);  // every page of the map now faults
  const std::string message = input_error_message([&] { shard.check_every_value(FeatureSetShape::of(c)); });
  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_THAT(message, HasSubstr(str("shrank from ", size, " to 0 bytes")));
}

// The ranks of a run split the reading of the values (ShardValueCheck {rank, R}): shard s is read by
// rank s % R alone, and the R parts together read every shard. A NaN in shard 1 of three is found
// by part 1 of 2 and by a whole read, and by no other part; every part checks every header.
TEST(FeatureShards, ValueChecksSplitTheShardsBetweenParts) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  for (int s = 0; s < 3; ++s) {
    RawShard raw(valid_shard(c, 4, 10 + s));
    if (s == 1) raw.tensors.at("target_features").values[5] = std::numeric_limits<double>::quiet_NaN();
    raw.write(dir / str("s", s, ".safetensors"));
  }
  const FeatureSetShape shape = FeatureSetShape::of(c);
  const std::string bad = (dir / "s1.safetensors").string();
  for (const ShardValueCheck part : {ShardValueCheck{0, 1}, ShardValueCheck{1, 2}, ShardValueCheck{1, 3}}) {
    EXPECT_THAT(input_error_message([&] { FeatureDataset::open(dir.path(), shape, part); }),
                ::testing::AllOf(HasSubstr(bad), HasSubstr("target_features")))
        << "part " << part.part << " of " << part.parts;
  }
  for (const ShardValueCheck part : {ShardValueCheck{0, 2}, ShardValueCheck{0, 3}, ShardValueCheck{2, 3}}) {
    EXPECT_EQ(FeatureDataset::open(dir.path(), shape, part).num_sequences(), 12)
        << "part " << part.part << " of " << part.parts;
  }
  // A header fault in a shard this part does not read the values of is still its error.
  RawShard broken(valid_shard(c, 4, 12));
  broken.metadata["format"] = "other";
  broken.write(dir / "s2.safetensors");
  EXPECT_THAT(input_error_message([&] {
                FeatureDataset::open(dir.path(), shape, ShardValueCheck{0, 3});
              }),
              HasSubstr((dir / "s2.safetensors").string()));
}

TEST(FeatureShards, DirectoryWithoutShardsIsRefused) {
  ScratchDirectory dir;
  EXPECT_THAT(input_error_message([&] { FeatureDataset::open(dir.path(), FeatureSetShape::of(tiny_config())); }),
              HasSubstr("holds no *.safetensors"));
  EXPECT_THAT(input_error_message([&] { FeatureDataset::open(dir / "absent", FeatureSetShape::of(tiny_config())); }),
              HasSubstr("is not a directory"));
}

TEST(FeatureShards, ShapeDeclaredByMetadataChecksWithoutAConfig) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  write_feature_shard(dir / "a.safetensors", valid_shard(c, 2, 5), safetensors::Dtype::F16);
  const FeatureSetShape s = FeatureSetShape::declared_by(dir / "a.safetensors");
  EXPECT_EQ(s.hidden_size, c.hidden_size);
  EXPECT_EQ(s.target_layer_ids, c.target_layer_ids);
  EXPECT_EQ(FeatureDataset::open(dir.path(), s).num_sequences(), 2);
}

// The declared shape sizes every buffer: 2^62 x K = 2 overflows the row width, 2^64 - 1 would wrap to
// a negative size if read as int64_t (found by fuzzing the shard reader under UBSan).
TEST(FeatureShards, DeclaredShapeBeyond64BitsIsRefused) {
  const DrafterConfig c = tiny_config();
  for (const std::string hidden : {"4611686018427387904", "18446744073709551615"}) {
    ScratchDirectory dir;
    RawShard raw(valid_shard(c, 2, 5));
    raw.metadata["hidden_size"] = hidden;
    raw.write(dir / "a.safetensors");
    const std::string message = input_error_message([&] { FeatureSetShape::declared_by(dir / "a.safetensors"); });
    EXPECT_THAT(message, HasSubstr("__metadata__.hidden_size")) << hidden;
    EXPECT_THAT(message, HasSubstr(hidden));
  }
}

// Class 9 of issue 22: an entry of the set that is a dangling link, a FIFO, a directory or a link to
// a device was skipped: `data check` said OK and `train` ran on part of the data. Each is refused,
// naming it, before any shard is read.
TEST(FeatureShards, EntryThatIsNotARegularFileIsRefusedNamingIt) {
  const DrafterConfig c = tiny_config();
  const std::pair<const char*, const char*> kinds[] = {{"dangling", "is a dangling symbolic link"},
                                                       {"fifo", "is a FIFO"},
                                                       {"directory", "is a directory"},
                                                       {"device", "is a character device"}};
  for (const auto& [kind, named] : kinds) {
    ScratchDirectory dir;
    write_feature_shard(dir / "a.safetensors", valid_shard(c, 2, 5), safetensors::Dtype::F32);
    const auto entry = dir / "b.safetensors";
    const std::string k = kind;
    if (k == "dangling") std::filesystem::create_symlink(dir / "absent", entry);
    if (k == "fifo") {
      ASSERT_EQ(::mkfifo(entry.c_str(), 0644), 0);
    }
    if (k == "directory") std::filesystem::create_directory(entry);
    if (k == "device") std::filesystem::create_symlink("/dev/zero", entry);
    const std::string message = input_error_message([&] { FeatureDataset::open(dir.path(), FeatureSetShape::of(c)); });
    EXPECT_THAT(message, HasSubstr(entry.string() + ": " + named)) << kind;
    EXPECT_THAT(input_error_message([&] { FeatureDataset::shard_files(dir.path()); }), HasSubstr(entry.string()))
        << kind;
  }
  // A link to a regular shard is a shard.
  ScratchDirectory dir, elsewhere;
  write_feature_shard(elsewhere / "a.safetensors", valid_shard(c, 2, 5), safetensors::Dtype::F32);
  std::filesystem::create_symlink(elsewhere / "a.safetensors", dir / "a.safetensors");
  EXPECT_EQ(FeatureDataset::open(dir.path(), FeatureSetShape::of(c)).num_sequences(), 2);
}

class MalformedShard : public ::testing::TestWithParam<MalformedShardCase> {};

TEST_P(MalformedShard, IsRefusedNamingFileTensorAndIndex) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  write_feature_shard(dir / "a-good.safetensors", valid_shard(c, 2, 8), safetensors::Dtype::BF16);
  RawShard raw(valid_shard(c, 4, 9));
  GetParam().damage(raw);
  raw.write(dir / "b-bad.safetensors");
  const std::string message = input_error_message([&] { FeatureDataset::open(dir.path(), FeatureSetShape::of(c)); });
  EXPECT_THAT(message, HasSubstr((dir / "b-bad.safetensors").string()));
  for (const std::string& s : GetParam().named) EXPECT_THAT(message, HasSubstr(s));
}

INSTANTIATE_TEST_SUITE_P(EveryCase, MalformedShard, ::testing::ValuesIn(malformed_shard_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(RawShard, ValidRawShardIsAccepted) {  // the cases above break exactly one thing
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  RawShard(valid_shard(c, 4, 9)).write(dir / "a.safetensors");
  EXPECT_EQ(FeatureDataset::open(dir.path(), FeatureSetShape::of(c)).num_rows(), 18);
}

}  // namespace
}  // namespace dflash
