// libFuzzer target for the config readers: the bytes are written as a config file and read as the
// drafter's config (reference/drafter_config.hpp, as every command does) and as the training
// config (distributed/training_config.hpp, as `train` does). A drafter config that loads must
// survive its own round trip: written back with drafter_config_to_json and read again, it gives
// the same JSON (as a checkpoint's stored config must, for `export` and `--resume`); likewise the
// training config. The only acceptable failure is dflash::InputError; a crash, a sanitizer report,
// any other exception or a round trip that differs is a finding. Built and run by
// `ci/fuzz config`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "distributed/training_config.hpp"
#include "fuzz/scratch_dir.hpp"
#include "io/errors.hpp"
#include "reference/drafter_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = dflash::fuzz::scratch_dir() / "config.json";
  dflash::fuzz::write_bytes(path, data, size);
  try {
    const dflash::DrafterConfig config = dflash::load_drafter_config(path);
    const nlohmann::json written = dflash::drafter_config_to_json(config);
    const nlohmann::json again =
        dflash::drafter_config_to_json(dflash::drafter_config_from_json(written, "round trip"));
    if (again != written) std::abort();  // a loaded config that its own writer cannot reproduce
  } catch (const dflash::InputError&) {
    // Refused, naming the field and the file: the expected outcome for most bytes.
  }
  try {
    const dflash::TrainingConfig training = dflash::load_training_config(path);
    const nlohmann::json written = dflash::training_config_to_json(training);
    const nlohmann::json again =
        dflash::training_config_to_json(dflash::training_config_from_json(written, "round trip"));
    if (again != written) std::abort();
  } catch (const dflash::InputError&) {}
  return 0;
}
