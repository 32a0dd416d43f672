// libFuzzer target for the Hugging Face checkpoint index (io/hf_checkpoint.hpp): the bytes are
// written as model.safetensors.index.json next to two valid shards, and opened as `train --init`
// and the golden tools open a sharded checkpoint. Beside the shards, the directory holds what an
// index must not be able to name into use: a subdirectory, a FIFO and a link to /dev/zero. A
// checkpoint that opens yields, for every name, its info, a plain shard file name, its bytes (the
// size its info says) and its values as doubles. The only
// acceptable failure is dflash::InputError; a crash, a sanitizer report, any other exception, or
// a hang on the FIFO (libFuzzer's -timeout) is a finding. Built and run by `ci/fuzz hf_index`.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/scratch_dir.hpp"
#include "io/errors.hpp"
#include "io/hf_checkpoint.hpp"
#include "io/safetensors.hpp"

namespace {

namespace st = dflash::safetensors;

// <scratch>/hf/: model-00001-of-00002.safetensors (embed_tokens.weight F32 [2, 3], norm.weight
// BF16 [3]), model-00002-of-00002.safetensors (lm_head.weight F64 [2, 3], position_ids I64 [2]),
// and the decoys subdir.safetensors/, fifo.safetensors and zero.safetensors -> /dev/zero.
const std::filesystem::path& checkpoint_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = dflash::fuzz::scratch_dir() / "hf";
    std::filesystem::create_directories(d / "subdir.safetensors");
    st::Writer first, second;
    first.add_floats("embed_tokens.weight", st::Dtype::F32, {2, 3}, std::vector<double>{1, 2, 3, 4, 5, 6});
    first.add_floats("norm.weight", st::Dtype::BF16, {3}, std::vector<double>{1, 1, 0.5});
    second.add_floats("lm_head.weight", st::Dtype::F64, {2, 3}, std::vector<double>{-1, 0, 1, 2, 3, 4});
    second.add_integers("position_ids", st::Dtype::I64, {2}, std::vector<std::int64_t>{0, 1});
    first.write_file(d / "model-00001-of-00002.safetensors");
    second.write_file(d / "model-00002-of-00002.safetensors");
    if (::mkfifo((d / "fifo.safetensors").c_str(), 0600) != 0) std::abort();
    std::filesystem::create_symlink("/dev/zero", d / "zero.safetensors");
    return d;
  }();
  return dir;
}

void read_everything(const dflash::HfCheckpoint& checkpoint) {
  volatile double sink = 0;
  for (const std::string& name : checkpoint.names()) {
    if (!checkpoint.contains(name)) std::abort();
    const st::TensorInfo& info = checkpoint.info(name);
    if (!dflash::is_plain_file_name(checkpoint.shard_of(name))) std::abort();
    const st::TensorData data = checkpoint.tensor(name);
    if (data.bytes.size() != info.byte_size()) std::abort();
    for (double v : checkpoint.doubles(name)) sink = sink + v;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path index = checkpoint_dir() / std::string(dflash::kHfIndexFileName);
  dflash::fuzz::write_bytes(index, data, size);
  try {
    read_everything(dflash::HfCheckpoint::open_index(index));
  } catch (const dflash::InputError&) {
    // Refused, naming the index and the entry: the expected outcome for most bytes.
  }
  return 0;
}
