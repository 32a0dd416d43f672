#include "distributed/data/feature_dataset.hpp"

#include <algorithm>

#include "io/errors.hpp"
#include "io/file_read.hpp"

namespace dflash {

std::vector<std::filesystem::path> FeatureDataset::shard_files(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw_input_error("--data", str("'", dir.string(), "' is not a directory"));
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    // A shard's name on something else (a dangling link, a FIFO, a directory, a device) is refused,
    // naming it: skipped, the run would train on part of the set while `data check` says OK.
    require_regular_file(entry.path());
    files.push_back(entry.path());
  }
  // Sorted by the bytes of the name (std::string compares chars as unsigned via char_traits).
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.filename().string() < b.filename().string(); });
  if (files.empty()) throw_input_error("--data", str("'", dir.string(), "' holds no *.safetensors feature shards"));
  return files;
}

FeatureDataset FeatureDataset::open(const std::filesystem::path& dir, const FeatureSetShape& shape,
                                    ShardValueCheck values) {
  FeatureDataset d;
  d.source_ = dir.string();
  d.shape_ = shape;
  d.first_sequence_.push_back(0);
  for (const auto& file : shard_files(dir)) {
    d.shards_.push_back(FeatureShard::open(file, shape, values.reads(std::int64_t(d.shards_.size()))));
    d.first_sequence_.push_back(d.first_sequence_.back() + d.shards_.back().num_sequences());
  }
  return d;
}

nlohmann::json FeatureDataset::fingerprint() const {
  nlohmann::json shards = nlohmann::json::array();
  for (const FeatureShard& s : shards_) {
    shards.push_back({{"file", std::filesystem::path(s.source()).filename().string()},
                      {"bytes", s.file_bytes()},
                      {"sequences", s.num_sequences()}});
  }
  return {{"shards", shards}, {"sequences", num_sequences()}};
}

std::int64_t FeatureDataset::num_rows() const {
  std::int64_t rows = 0;
  for (const FeatureShard& s : shards_) rows += s.num_rows();
  return rows;
}

std::pair<const FeatureShard*, std::int64_t> FeatureDataset::locate(std::int64_t i) const {
  if (i < 0 || i >= num_sequences()) {
    throw std::out_of_range(str("sequence ", i, " is outside the set of ", num_sequences()));
  }
  const auto it = std::upper_bound(first_sequence_.begin(), first_sequence_.end(), i) - 1;
  const auto s = std::size_t(it - first_sequence_.begin());
  return {&shards_[s], i - *it};
}

std::int64_t FeatureDataset::sequence_length(std::int64_t i) const {
  const auto [shard, local] = locate(i);
  return shard->sequence_length(local);
}

template <class Value>
void FeatureDataset::read_rows(std::int64_t i, std::int64_t rows, std::int64_t* tokens, std::uint8_t* loss_mask,
                               Value* target_features, Value* teacher_hidden) const {
  const auto [shard, local] = locate(i);
  shard->require_unshrunk();  // a shard cut while the run reads it: a named error, not SIGBUS
  const std::int64_t begin = shard->sequence_begin(local);
  // Cut after the check above, the copy faults: read_guarded turns that into the same named error.
  shard->read_guarded([&] {
    for (std::int64_t p = 0; p < rows; ++p) {
      tokens[p] = shard->token(begin + p);
      loss_mask[p] = shard->loss_mask(begin + p);
    }
    shard->feature_rows(begin, rows, target_features);
    shard->teacher_rows(begin, rows, teacher_hidden);
  });
}

FeatureSequence FeatureDataset::sequence(std::int64_t i, std::int64_t max_context) const {
  FeatureSequence q;
  q.index = i;
  q.original_length = sequence_length(i);
  q.truncated = q.original_length > max_context;
  const std::int64_t S = std::min(q.original_length, max_context);
  q.tokens.resize(std::size_t(S));
  q.loss_mask.resize(std::size_t(S));
  q.target_features.resize(std::size_t(S * shape_.feature_width()));
  q.teacher_hidden.resize(std::size_t(S * shape_.hidden_size));
  read_rows(i, S, q.tokens.data(), q.loss_mask.data(), q.target_features.data(), q.teacher_hidden.data());
  return q;
}

namespace {

// A one-sequence batch of S rows: its tokens and loss mask, and F and G as given (empty when the
// sequence's features are held elsewhere).
DrafterBatch<double> one_sequence_batch(MemoryTracker& tracker, std::int64_t S, Tensor<double> F, Tensor<double> G) {
  const MemoryCategory in = MemoryCategory::inputs;
  return {Tensor<std::int64_t>(tracker, in, {1, S}),
          Tensor<std::uint8_t>(tracker, in, {1, S}),
          std::move(F),
          std::move(G),
          std::nullopt,
          std::nullopt};
}

}  // namespace

FeatureDataset::Batch FeatureDataset::sequence_batch(MemoryTracker& tracker, std::int64_t i,
                                                     std::int64_t max_context) const {
  Batch b;
  b.original_length = sequence_length(i);
  b.truncated = b.original_length > max_context;
  const std::int64_t S = std::min(b.original_length, max_context);
  const MemoryCategory in = MemoryCategory::inputs;
  b.batch = one_sequence_batch(tracker, S, Tensor<double>(tracker, in, {1, S, shape_.feature_width()}),
                               Tensor<double>(tracker, in, {1, S, shape_.hidden_size}));
  read_rows(i, S, b.batch.tokens.data(), b.batch.loss_mask.data(), b.batch.target_features.data(),
            b.batch.teacher_hidden.data());
  return b;
}

FeatureDataset::Bf16Batch FeatureDataset::sequence_bf16_batch(MemoryTracker& tracker, std::int64_t i,
                                                              std::int64_t max_context) const {
  Bf16Batch b;
  b.original_length = sequence_length(i);
  b.truncated = b.original_length > max_context;
  const std::int64_t S = std::min(b.original_length, max_context);
  const MemoryCategory in = MemoryCategory::inputs;
  b.batch = one_sequence_batch(tracker, S, Tensor<double>(), Tensor<double>());
  b.features = {Tensor<Bf16Bits>(tracker, in, {1, S, shape_.feature_width()}),
                Tensor<Bf16Bits>(tracker, in, {1, S, shape_.hidden_size})};
  read_rows(i, S, b.batch.tokens.data(), b.batch.loss_mask.data(), b.features.target_features.data(),
            b.features.teacher_hidden.data());
  for (const auto& [name, x] :
       {std::pair<const char*, const Tensor<Bf16Bits>*>{"target_features", &b.features.target_features},
        std::pair<const char*, const Tensor<Bf16Bits>*>{"teacher_hidden", &b.features.teacher_hidden}}) {
    const std::int64_t e = first_non_finite_bf16(x->data(), x->numel());
    if (e < 0) continue;
    const auto [shard, local] = locate(i);
    const std::int64_t width = x->dim(2);
    throw_input_error(str(shard->source(), ": ", name, "[", shard->sequence_begin(local) + e / width, "]"),
                      str("element ", e % width,
                          " is beyond bf16's range (its rounding is not finite); "
                          "the CUDA step computes in bf16"));
  }
  return b;
}

}  // namespace dflash
