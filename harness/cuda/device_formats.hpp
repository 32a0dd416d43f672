// A reference problem rounded to the values the device computes on (CPU only, no CUDA headers):
// weight matrices, E, W_lm, F and G to bf16 (round to nearest even through fp32, as the uploads
// round them), norm weights to fp32. The double reference run on the rounded problem computes
// exactly on the device's inputs, so input rounding is no part of any measured error.
#pragma once

#include <cstdint>
#include <string>

#include "common/bf16.hpp"
#include "reference/drafter_parameters.hpp"
#include "reference/tensor.hpp"

namespace dflash {

inline void round_to_bf16_in_place(Tensor<double>& t) {
  for (std::int64_t e = 0; e < t.numel(); ++e) t[e] = round_to_bf16(static_cast<float>(t[e]));
}

// Matrices to bf16, vectors (norm weights) to fp32.
inline void round_parameters_to_device_formats(DrafterParameters<double>& params) {
  params.for_each([&](const std::string&, Tensor<double>& t) {
    if (t.rank() == 2) {
      round_to_bf16_in_place(t);
    } else {
      for (std::int64_t e = 0; e < t.numel(); ++e) t[e] = static_cast<float>(t[e]);
    }
  });
}

}  // namespace dflash
