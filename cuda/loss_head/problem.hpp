// A reference loss-head problem (reference/loss_head_problem.hpp) on the device in the production
// formats, and one forward + backward of the CUDA loss head read back into the reference's result
// type: what the tests, the properties and `dflash verify --device cuda` compare.
#pragma once

#include <cstdint>

#include "cuda/loss_head/head.hpp"
#include "reference/loss_head_problem.hpp"

namespace dflash {

struct CudaLossHeadProblem {
  CudaLossHeadShape shape;
  DeviceBuffer<Bf16Bits> hidden;          // Y [T,H]
  DeviceBuffer<Bf16Bits> teacher_hidden;  // G rows [T,H]
  DeviceBuffer<Bf16Bits> lm_head;         // W_lm [V,H]
  DeviceBuffer<std::int64_t> labels;
  DeviceBuffer<float> weights;
  DeviceBuffer<std::uint8_t> valid;
  double weight_sum = 0;

  CudaLossHeadTargets targets() const {
    return CudaLossHeadTargets{teacher_hidden.data(), lm_head.data(), {labels.data(), weights.data(), valid.data()}};
  }
};

// Tensors are rounded to bf16 and weights to fp32 on the way (exact for a problem that
// round_to_device_formats (reference/bf16_emulation.hpp) produced). Counted as inputs and frozen.
CudaLossHeadProblem upload_loss_head_problem(DeviceAllocator& allocator, const LossHeadProblem<double>& problem);

// Forward then backward on the device; lse, token loss and dL/dY come back as doubles, counted
// by `host` (outputs, gradients).
LossHeadResult<double> run_loss_head_cuda(DeviceAllocator& allocator, MemoryTracker& host,
                                          const LossHeadOptions& options, const CudaLossHeadProblem& problem);

}  // namespace dflash
