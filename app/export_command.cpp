// `dflash export --checkpoint DIR --out DIR`: a run's checkpoint as the Hugging Face drafter
// directory DFlash inference code loads (TRAINING §16). DIR is a checkpoint (step-XXXXXXXX) or a
// run directory (its `latest`).
#include <iostream>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "distributed/checkpoint/save_restore.hpp"
#include "distributed/flat_parameters.hpp"
#include "distributed/weights/drafter_export.hpp"
#include "distributed/weights/target_tensors.hpp"
#include "io/errors.hpp"

namespace dflash::app {

void add_export_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "export", "Write a checkpoint as a Hugging Face DFlash drafter (config.json, bf16 model.safetensors)");
  auto checkpoint = std::make_shared<std::string>(), out = std::make_shared<std::string>(),
       target = std::make_shared<std::string>();
  cmd->add_option("--checkpoint", *checkpoint, "Checkpoint directory, or a run directory (its latest)")->required();
  cmd->add_option("--out", *out, "New (or empty) output directory")->required();
  cmd->add_option("--target", *target,
                  "The target's directory, for checkpoints that do not record its layer count "
                  "(num_target_layers); checked against it otherwise");
  cmd->callback([checkpoint, out, target, &exit_code] {
    std::filesystem::path dir = *checkpoint;
    std::error_code ec;
    if (std::filesystem::exists(dir / kLatestFileName, ec)) dir = *latest_checkpoint(dir);
    if (std::filesystem::exists(*out, ec) &&
        !(std::filesystem::is_directory(*out, ec) && std::filesystem::is_empty(*out, ec))) {
      throw_input_error("--out", str("'", *out, "' exists and is not an empty directory"));
    }
    const nlohmann::json recorded = checkpoint_config_json(dir);
    const std::string source = (dir / kTrainerStateFileName).string();
    DrafterConfig config = drafter_config_from_json(recorded, source);
    if (!target->empty()) {
      config.num_target_layers = resolve_target_depth({config, source, *target});
      validate_drafter_config(config, source);
    }
    // The master weights alone, each tensor read into its place: P doubles on the host (13.8 GB at
    // full scale), not the checkpoint's three vectors and a copy of the first (55 GB). Every hash,
    // name, dtype and shape is still checked first.
    const RunCheckpointReader reader = RunCheckpointReader::open(dir, config);
    const nlohmann::json* released = recorded.contains(kInitConfigKey) ? &recorded.at(kInitConfigKey) : nullptr;
    MemoryTracker tracker;
    DrafterParameters<double> params = make_drafter_parameters<double>(tracker, config, MemoryCategory::parameters);
    std::int64_t first = 0;
    for (Tensor<double>* t : flat_tensors(params)) {
      reader.read(OptimizerPart::master, first, std::span<double>(t->data(), std::size_t(t->numel())));
      first += t->numel();
    }
    export_drafter(*out, config, params, released);
    std::cout << "dflash export: " << dir.string() << " (step " << reader.state().step << ") -> " << *out << "\n";
    exit_code = 0;
  });
}

}  // namespace dflash::app
