// libFuzzer target for a checkpoint's tensor files and its `latest` pointer
// (distributed/checkpoint/save_restore.hpp): the first byte picks the file of a small valid
// checkpoint (fuzz/tiny_checkpoint.hpp) that the other bytes replace: model.safetensors,
// optimizer.safetensors or the run's `latest`. trainer_state.json then records the replaced
// file's real sha256, as an attacker able to write the checkpoint would, so that inputs get past
// the hash check to the tensor reads. The run is then read as `train --resume` reads it
// (latest_checkpoint, read_run_checkpoint). A checkpoint that loads holds the config's full
// vectors; a `latest` that is accepted names a step-<8 digits> directory of the run. The only
// acceptable failure is dflash::InputError; a crash, a sanitizer report or any other exception is
// a finding. Built and run by `ci/fuzz checkpoint`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz/tiny_checkpoint.hpp"
#include "io/errors.hpp"
#include "io/sha256.hpp"

namespace {

std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Pristine {
  std::string model, optimizer, latest;
  nlohmann::json state;
};

const Pristine& pristine() {
  static const Pristine p = [] {
    const std::filesystem::path& dir = dflash::fuzz::tiny_checkpoint_dir();
    return Pristine{file_text(dir / dflash::kModelFileName), file_text(dir / dflash::kOptimizerFileName),
                    file_text(dir.parent_path() / dflash::kLatestFileName),
                    nlohmann::json::parse(file_text(dir / dflash::kTrainerStateFileName))};
  }();
  return p;
}

void put(const std::filesystem::path& path, std::string_view bytes) {
  dflash::fuzz::write_bytes(path, bytes.data(), bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const dflash::DrafterConfig& config = dflash::fuzz::tiny_checkpoint_config();
  const std::filesystem::path& dir = dflash::fuzz::tiny_checkpoint_dir();
  const std::filesystem::path run = dir.parent_path();
  const Pristine& p = pristine();
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const unsigned which = data[0] % 3u;
  const std::string_view model = which == 0 ? input : p.model, optimizer = which == 1 ? input : p.optimizer;
  put(dir / dflash::kModelFileName, model);
  put(dir / dflash::kOptimizerFileName, optimizer);
  put(run / dflash::kLatestFileName, which == 2 ? input : p.latest);
  nlohmann::json state = p.state;
  state["sha256"][dflash::kModelFileName] = dflash::sha256_hex(model);
  state["sha256"][dflash::kOptimizerFileName] = dflash::sha256_hex(optimizer);
  put(dir / dflash::kTrainerStateFileName, state.dump(2));
  try {
    const std::optional<std::filesystem::path> latest = dflash::latest_checkpoint(run);
    if (!latest || latest->parent_path() != run || latest->filename().string().rfind("step-", 0) != 0) std::abort();
  } catch (const dflash::InputError&) {
    // Refused, naming the file: the expected outcome for most bytes.
  }
  try {
    const dflash::RunCheckpoint c = dflash::read_run_checkpoint(dir, config);
    const auto n = static_cast<std::size_t>(dflash::drafter_parameter_count(config));
    if (c.master.size() != n || c.exp_avg.size() != n || c.exp_avg_sq.size() != n) std::abort();
  } catch (const dflash::InputError&) {}
  return 0;
}
