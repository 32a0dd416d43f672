// The committed golden cases (golden/README.md documents each) and how a golden is generated:
// deterministic data from seeds, anchors sampled by SPEC §4 for (seed, step, sequence), one
// reference drafter step in double, everything stored.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "golden/file.hpp"
#include "reference/drafter_problem.hpp"

namespace dflash {

struct GoldenCase {
  std::string name;     // also the file's stem: golden/data/<name>.safetensors
  std::string summary;  // what the case exercises, one line
  DrafterConfig config;
  DrafterBatchSpec batch;  // anchors are sampled (explicit_anchors stays false)
  // Sequences whose loss mask is all zero: no candidates, every slot an invalid block (kappa = 0).
  std::vector<std::int64_t> unlabelled_sequences = {};
  std::uint64_t parameter_seed = 1;  // parameters from it, frozen weights from parameter_seed + 1
  double norm_jitter = 0.3;          // norm weights 1 +- jitter, so that their gradients are non-trivial
  std::uint32_t step = 0;
  // A Hugging Face drafter directory (config.json + model.safetensors, exported or released) to
  // take the trainable parameters from instead of parameter_seed and norm_jitter; E and W_lm, the
  // target's, stay seeded. Its config.json must agree with `config` on every SPEC §1 model field.
  std::optional<std::filesystem::path> weights = std::nullopt;
};

// The flag that names GoldenCase::weights in messages.
inline constexpr std::string_view kGoldenWeightsFlag = "--weights";

// Every case, in the order of golden/README.md.
const std::vector<GoldenCase>& golden_cases();

// The case called `name`; InputError listing the known names otherwise.
const GoldenCase& golden_case(std::string_view name);

// "<name>.safetensors"
std::string golden_file_name(std::string_view case_name);

// What a golden at real weights records in its `case` (the only free-text key of SPEC §9's
// metadata) after the case's name: " (weights <file> sha256 <hex>, ...)", every weight file of
// the directory in name order (model.safetensors, or the shards of a sharded index).
std::string golden_weights_provenance(const std::filesystem::path& weights_dir);

// The generated golden of a case (source: "generated case <name>"). With `weights`: the
// parameters are the directory's, imported as `dflash train --init` imports them (the same
// refusals, naming the file and --weights), and `case` is the name plus the provenance above.
Golden generate_golden(const GoldenCase& golden_case);

// Where the committed goldens are: $DFLASH_GOLDEN_DIR if set, else the source tree's golden/data.
std::filesystem::path default_golden_dir();

}  // namespace dflash
