// A feature set (TRAINING §14): a directory of shards read in file-name order (names sorted by
// their bytes), sequence i being the i-th of the set. Every shard is mapped and validated when
// the set is opened, so a malformed file is refused before training starts; rows are read
// through the maps as the data order visits them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "distributed/data/feature_shard.hpp"
#include "reference/drafter_batch.hpp"

namespace dflash {

// One sequence, cut to max_context rows (its first ones) when longer.
struct FeatureSequence {
  std::int64_t index = 0;            // i in the set
  std::int64_t original_length = 0;  // rows in the shard
  bool truncated = false;            // original_length > max_context
  std::vector<std::int64_t> tokens;  // [S]
  std::vector<std::uint8_t> loss_mask;
  std::vector<double> target_features;  // [S, K H]
  std::vector<double> teacher_hidden;   // [S, H]
  std::int64_t length() const { return std::int64_t(tokens.size()); }
};

// Which shards' values FeatureDataset::open reads and checks (FeatureShard::check_every_value);
// the header, metadata, shapes and offsets of every shard are checked in any case. Shard s (in
// file-name order) when s % parts == part: {0, 1} reads them all (`data check`, one rank); the R
// ranks of a run each take {rank, R}, so that together they read the set once, R at a time
// (validation reads every byte of a set that can be terabytes).
struct ShardValueCheck {
  std::int64_t part = 0, parts = 1;
  bool reads(std::int64_t shard) const { return parts > 0 && shard % parts == part; }
};

class FeatureDataset {
 public:
  // The shard files of `dir`: the entries named *.safetensors, sorted by their bytes. Throws
  // dflash::InputError naming the directory when it is missing or holds none, and naming the entry
  // when one is not (a link to) a regular file.
  static std::vector<std::filesystem::path> shard_files(const std::filesystem::path& dir);

  // Opens and validates every shard (feature_shard.hpp), reading the values of those `values` names.
  static FeatureDataset open(const std::filesystem::path& dir, const FeatureSetShape& shape,
                             ShardValueCheck values = {});

  const std::string& source() const { return source_; }
  std::int64_t num_sequences() const { return first_sequence_.back(); }
  std::int64_t num_rows() const;
  std::int64_t num_shards() const { return std::int64_t(shards_.size()); }
  const FeatureShard& shard(std::int64_t s) const { return shards_[std::size_t(s)]; }
  std::int64_t sequence_length(std::int64_t i) const;

  // What a checkpoint records of the set it was trained on, and a resume compares: each shard's file
  // name, size in bytes and sequence count, and the total of sequences. Another set (a shard added,
  // removed, renamed, rewritten to another size) gives another fingerprint.
  nlohmann::json fingerprint() const;

  // Sequence i with its first min(length, max_context) rows.
  FeatureSequence sequence(std::int64_t i, std::int64_t max_context) const;

  // The same rows as a one-sequence batch of the drafter step (SPEC §2 layout, anchors sampled in
  // the step), read from the map straight into the batch's tensors (counted by `tracker`; a
  // double tensor's storage is reused from the pool, so a run's steps do not page in fresh memory):
  // what training and evaluation read, 10^8 feature values a sequence at full scale.
  struct Batch {
    DrafterBatch<double> batch;
    std::int64_t original_length = 0;  // rows in the shard
    bool truncated = false;            // original_length > max_context
  };
  Batch sequence_batch(MemoryTracker& tracker, std::int64_t i, std::int64_t max_context) const;

  // The same with F and G rounded to bf16 as they are read (FeatureShard::feature_rows into bf16:
  // the bits the upload's rounding, bf16_bits_into, makes of sequence_batch's doubles), what a CUDA
  // step reads of them: the batch holds the tokens and mask, and empty F and G. A value beyond bf16's range (an
  // F32 shard's, past ±3.39e38) is an InputError naming the shard, the row and the element.
  struct Bf16Batch {
    DrafterBatch<double> batch;
    Bf16Features features;
    std::int64_t original_length = 0;
    bool truncated = false;
  };
  Bf16Batch sequence_bf16_batch(MemoryTracker& tracker, std::int64_t i, std::int64_t max_context) const;

 private:
  std::string source_;
  FeatureSetShape shape_;
  std::vector<FeatureShard> shards_;
  std::vector<std::int64_t> first_sequence_;  // [shards + 1]: index of each shard's sequence 0
  std::pair<const FeatureShard*, std::int64_t> locate(std::int64_t i) const;
  // The first `rows` rows (at most its length) of sequence i into memory that exists.
  template <class Value>  // double, or Bf16Bits (rounded)
  void read_rows(std::int64_t i, std::int64_t rows, std::int64_t* tokens, std::uint8_t* loss_mask,
                 Value* target_features, Value* teacher_hidden) const;
};

}  // namespace dflash
