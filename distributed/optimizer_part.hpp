// The optimizer's three flat vectors (TRAINING §12): the master weights and AdamW's two moments,
// and their values as a backend holds them. A checkpoint is written from them one at a time in
// kOptimizerParts' order (distributed/checkpoint/save_restore.hpp), and every rank takes part in
// each one's gather in that order.
#pragma once

#include <array>
#include <variant>
#include <vector>

namespace dflash {

enum class OptimizerPart { master, exp_avg, exp_avg_sq };

inline constexpr std::array<OptimizerPart, 3> kOptimizerParts = {OptimizerPart::master, OptimizerPart::exp_avg,
                                                                 OptimizerPart::exp_avg_sq};

// One whole flat vector (P values, canonical order of drafter_parameter_shapes) in the backend's
// master precision: double in the reference, fp32 on a device. Kept in that type up to the file,
// whose bytes are the same either way (safetensors::Writer::add_floats_view), so that a device
// backend's gather costs 4 P bytes, not 8 P (6.9 GB less a vector at full scale).
using FlatValues = std::variant<std::vector<double>, std::vector<float>>;

}  // namespace dflash
