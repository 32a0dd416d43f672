// One feature shard (TRAINING §14): a safetensors file of packed sequences written offline from
// the target model, memory-mapped and validated whole when opened.
//
//   __metadata__: format = "dflash-features", version = "1", hidden_size, target_layer_ids (JSON
//                 list), num_sequences, optionally target_model
//   offsets          I64 [n+1]          sequence i is rows offsets[i] .. offsets[i+1]-1, offsets[0] = 0
//   tokens           I32 | I64 [rows]
//   loss_mask        U8 | BOOL [rows]   0 or 1
//   target_features  BF16 | F16 | F32 [rows, K H]   SPEC §2's F (HF hidden_states[id + 1], ids in order)
//   teacher_hidden   BF16 | F16 | F32 [rows, H]     SPEC §2's G (final-normed last hidden state)
//
// Every malformed case is refused with the file, the tensor (or metadata key) and the index named:
// a missing tensor, a wrong dtype or shape, offsets that do not start at 0 or do not increase, a
// token outside [0, vocab_size), a mask value other than 0/1, a width that is not the config's K H
// or H, a non-finite feature or teacher value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "io/mapped_file.hpp"
#include "io/safetensors.hpp"
#include "reference/bf16_bits.hpp"
#include "reference/drafter_config.hpp"

namespace dflash {

inline constexpr std::string_view kFeatureShardFormat = "dflash-features";
inline constexpr std::string_view kFeatureShardVersion = "1";

// What a drafter config requires of its feature set.
struct FeatureSetShape {
  std::int64_t hidden_size = 0;                // H
  std::vector<std::int64_t> target_layer_ids;  // K = its length
  std::int64_t vocab_size = 0;                 // tokens lie in [0, V)

  static FeatureSetShape of(const DrafterConfig& config);
  // H and the layer ids a shard's metadata declares, any token id accepted (no config to check
  // against: `dflash data check` without --config).
  static FeatureSetShape declared_by(const std::filesystem::path& shard);
  std::int64_t feature_width() const { return std::int64_t(target_layer_ids.size()) * hidden_size; }  // K H
};

class FeatureShard {
 public:
  // Maps `path` and validates everything listed above; throws dflash::InputError
  // "invalid <path>: <tensor or key>[index]: <problem>" at the first problem. With
  // read_every_value false only the header, metadata, shapes and offsets are checked (a shard
  // whose values another rank reads: ShardValueCheck, feature_dataset.hpp).
  static FeatureShard open(const std::filesystem::path& path, const FeatureSetShape& shape,
                           bool read_every_value = true);

  // Reads every value and checks it (open does, with read_every_value): token ids in [0, V), loss
  // mask 0 or 1, features and teacher states finite; throws as open at the first problem, and an
  // InputError naming the file when it is cut under the scan (MappedFile::copy_guarded).
  void check_every_value(const FeatureSetShape& shape) const;

  const std::string& source() const { return source_; }
  std::uint64_t file_bytes() const { return file_.size(); }
  // Throws dflash::InputError naming the shard when its file has shrunk since it was opened.
  void require_unshrunk() const { file_.require_unshrunk(); }
  // Runs `copy` (reads of this shard's rows into memory that already exists) so that the shard
  // cut under it ends as dflash::InputError naming the file, never SIGBUS (MappedFile::copy_guarded).
  template <class Copy>
  void read_guarded(Copy&& copy) const {
    file_.copy_guarded(copy);
  }
  const std::string& target_model() const { return target_model_; }  // empty when not given
  std::int64_t num_sequences() const { return std::int64_t(offsets_.size()) - 1; }
  std::int64_t num_rows() const { return offsets_.back(); }
  std::int64_t sequence_begin(std::int64_t i) const { return offsets_[std::size_t(i)]; }
  std::int64_t sequence_length(std::int64_t i) const { return offsets_[std::size_t(i) + 1] - offsets_[std::size_t(i)]; }

  std::int64_t token(std::int64_t row) const;
  std::uint8_t loss_mask(std::int64_t row) const;
  // Rows [first, first + count) of F (K H values a row) or G (H values a row), converted exactly to
  // double into out (count x width values). One conversion over the rows, which lie next to each
  // other in the map: a full-scale sequence is 10^8 values.
  void feature_rows(std::int64_t first, std::int64_t count, double* out) const;
  void teacher_rows(std::int64_t first, std::int64_t count, double* out) const;
  // The same rows rounded to bf16: each value's bits as bf16_bits_into makes them of the double
  // above (what the CUDA step's upload does), through a buffer of doubles on the stack: nothing is
  // allocated, so they may run inside read_guarded.
  void feature_rows(std::int64_t first, std::int64_t count, Bf16Bits* out) const;
  void teacher_rows(std::int64_t first, std::int64_t count, Bf16Bits* out) const;

 private:
  // A tensor's place in the map.
  struct View {
    safetensors::Dtype dtype = safetensors::Dtype::F32;
    const std::byte* data = nullptr;
    std::int64_t width = 1;  // elements per row
  };
  static void load_rows(const View& v, std::int64_t first, std::int64_t count, double* out);
  static void load_rows(const View& v, std::int64_t first, std::int64_t count, Bf16Bits* out);

  std::string source_;
  std::string target_model_;
  MappedFile file_;
  std::vector<std::int64_t> offsets_;
  View tokens_, loss_mask_, features_, teacher_;
};

}  // namespace dflash
