// libFuzzer target for a checkpoint's trainer_state.json (distributed/checkpoint/save_restore.hpp):
// the bytes replace trainer_state.json in a valid checkpoint (fuzz/tiny_checkpoint.hpp), which is
// then read as `train --resume` reads it (read_run_checkpoint) and as `export` does
// (checkpoint_config_json, then the drafter config reader). So that inputs get past the hash
// check, the text "@model.safetensors@" and "@optimizer.safetensors@" in the input is replaced by
// the real sha256 of that file (the seeds use it where the writer puts the hash). A checkpoint
// that loads must hold the config's full vectors and counters a run can have (issue 22, class 12):
// the step of its directory (step-00000001) within kMaxCheckpointStep, a cursor, a token count
// that are not negative, and at least one rank. The only acceptable failure is
// dflash::InputError; a crash, a sanitizer report or any other exception is a finding. Built and
// run by `ci/fuzz trainer_state`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz/tiny_checkpoint.hpp"
#include "io/errors.hpp"
#include "io/sha256.hpp"

namespace {

void replace_all(std::string& text, std::string_view from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const dflash::DrafterConfig& config = dflash::fuzz::tiny_checkpoint_config();
  const std::filesystem::path& dir = dflash::fuzz::tiny_checkpoint_dir();
  static const std::string model_hash = dflash::sha256_file_hex(dir / dflash::kModelFileName);
  static const std::string optimizer_hash = dflash::sha256_file_hex(dir / dflash::kOptimizerFileName);
  std::string text(reinterpret_cast<const char*>(data), size);
  replace_all(text, "@model.safetensors@", model_hash);
  replace_all(text, "@optimizer.safetensors@", optimizer_hash);
  dflash::fuzz::write_bytes(dir / dflash::kTrainerStateFileName, text.data(), text.size());
  try {
    const dflash::RunCheckpoint c = dflash::read_run_checkpoint(dir, config);
    const auto n = static_cast<std::size_t>(dflash::drafter_parameter_count(config));
    if (c.master.size() != n || c.exp_avg.size() != n || c.exp_avg_sq.size() != n) std::abort();
    if (dflash::checkpoint_name(c.step) != dir.filename().string() || c.step > dflash::kMaxCheckpointStep) {
      std::abort();
    }
    if (c.data_cursor.epoch < 0 || c.data_cursor.position < 0 || c.tokens_seen < 0 || c.world_size < 1) std::abort();
  } catch (const dflash::InputError&) {
    // Refused, naming the file and the key: the expected outcome for most bytes.
  }
  try {
    dflash::drafter_config_from_json(dflash::checkpoint_config_json(dir), "checkpoint config");
  } catch (const dflash::InputError&) {}
  return 0;
}
