// The shared host/device headers (common/) evaluated on the host by code that nvcc compiled and
// by code that the host compiler compiled: both must give the same bits (the kernels use these
// headers, and nvcc's host pass must not change what the CPU reference computes).
#pragma once

#include <cstdint>
#include <vector>

namespace dflash {

struct SharedHeaderInputs {
  std::vector<float> z, t;  // one row of logits
  std::int64_t label = 0;
  float tau = 1.0f;
  std::vector<float> to_round;  // values for bf16 rounding
  std::uint64_t seed = 0;
};

struct SharedHeaderOutputs {
  std::vector<float> stats;           // every HybridRowStats field: streamed, and merged from two halves
  std::vector<std::int64_t> indices;  // argmax and count, both ways
  std::vector<float> row;             // finish_row results
  std::vector<float> grads;           // hybrid_logit_grad for every column
  std::vector<std::uint32_t> words;   // Philox words and dropout decisions
  std::vector<std::uint16_t> bf16;    // rounding results
};

SharedHeaderOutputs shared_headers_via_nvcc(const SharedHeaderInputs& in);
SharedHeaderOutputs shared_headers_via_host_compiler(const SharedHeaderInputs& in);

}  // namespace dflash
