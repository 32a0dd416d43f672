// libFuzzer target for the feature shard reader (distributed/data/feature_shard.hpp): the bytes are
// written as a shard file (the reader maps a path) and opened twice, once with the shape its own
// metadata declares (as `dflash data check` without --config does) and once with a fixed config's
// shape (H 4, K 2, V 32, as `train` does); a shard either opens does yield every row (tokens, mask
// values, feature and teacher rows) inside its bounds. The only acceptable failure is
// dflash::InputError; a crash, a sanitizer report, or any other exception is a finding. Built and
// run by `ci/fuzz feature_shard`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "distributed/data/feature_shard.hpp"
#include "fuzz/scratch_dir.hpp"
#include "io/errors.hpp"

namespace {

using dflash::FeatureSetShape;
using dflash::FeatureShard;

// Reads every row through the public accessors so that ASan sees any out-of-bounds view.
void read_every_row(const FeatureShard& shard, const FeatureSetShape& shape) {
  std::vector<double> feature(static_cast<std::size_t>(shape.feature_width()));
  std::vector<double> teacher(static_cast<std::size_t>(shape.hidden_size));
  volatile double sink = 0;
  std::int64_t rows = 0;
  for (std::int64_t i = 0; i < shard.num_sequences(); ++i) {
    if (shard.sequence_length(i) < 0 || shard.sequence_begin(i) != rows) std::abort();  // offsets not validated
    rows += shard.sequence_length(i);
  }
  if (rows != shard.num_rows()) std::abort();
  for (std::int64_t row = 0; row < shard.num_rows(); ++row) {
    const std::int64_t token = shard.token(row);
    if (token < 0 || token >= shape.vocab_size) std::abort();  // a token outside [0, V) got through
    if (shard.loss_mask(row) > 1) std::abort();
    shard.feature_rows(row, 1, feature.data());
    shard.teacher_rows(row, 1, teacher.data());
    sink = sink + feature.front() + teacher.front();
  }
}

void open_with(const std::filesystem::path& path, const FeatureSetShape& shape) {
  try {
    const FeatureShard shard = FeatureShard::open(path, shape);
    read_every_row(shard, shape);
  } catch (const dflash::InputError&) {
    // Refused, naming the file and the tensor: the expected outcome for most bytes.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = dflash::fuzz::scratch_dir() / "shard.safetensors";
  dflash::fuzz::write_bytes(path, data, size);
  try {
    FeatureSetShape declared = FeatureSetShape::declared_by(path);
    open_with(path, declared);
  } catch (const dflash::InputError&) {}
  open_with(path, FeatureSetShape{.hidden_size = 4, .target_layer_ids = {1, 3}, .vocab_size = 32});
  return 0;
}
