// The committed golden cases (golden/README.md documents each) and how a golden is generated:
// deterministic data from seeds, anchors sampled by SPEC §4 for (seed, step, sequence), one
// reference drafter step in double, everything stored.
#pragma once

#include <cstdint>
#include <filesystem>
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
};

// Every case, in the order of golden/README.md.
const std::vector<GoldenCase>& golden_cases();

// The case called `name`; InputError listing the known names otherwise.
const GoldenCase& golden_case(std::string_view name);

// "<name>.safetensors"
std::string golden_file_name(std::string_view case_name);

// The generated golden of a case (source: "generated case <name>").
Golden generate_golden(const GoldenCase& golden_case);

// Where the committed goldens are: $DFLASH_GOLDEN_DIR if set, else the source tree's golden/data.
std::filesystem::path default_golden_dir();

}  // namespace dflash
