// What `dflash export` writes at a config, without training or writing weights: the exported
// config.json and every tensor's name, dtype and shape, as JSON on stdout
//   {"config": {...}, "tensors": {"fc.weight": {"dtype": "BF16", "shape": [H, K H]}, ...}}
// for the serving conformance check (serving_conformance_test.py) at shapes, such as the
// full-scale drafter's, too large to export in CI. The config must give num_target_layers.
#include <iostream>

#include <nlohmann/json.hpp>

#include "distributed/weights/drafter_export.hpp"
#include "io/errors.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: export_manifest CONFIG.json\n";
    return 2;
  }
  try {
    const dflash::DrafterConfig config = dflash::load_drafter_config(argv[1]);
    nlohmann::json tensors = nlohmann::json::object();
    for (const dflash::ExportedTensor& t : dflash::exported_tensors(config)) {
      tensors[t.name] = {{"dtype", std::string(dflash::safetensors::dtype_name(t.dtype))}, {"shape", t.shape}};
    }
    std::cout << nlohmann::json{{"config", dflash::exported_drafter_config(config)}, {"tensors", tensors}}.dump(2)
              << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "export_manifest: " << e.what() << "\n";
    return 2;
  }
}
