// The TrunkLayerContext of one sequence of a drafter step: the config's norm, RoPE, window and
// dropout settings, the step's dropout coordinates (seed, step, and `sequence`: the GLOBAL sequence
// index, options.sequence_offset + b for the batch's sequence b, SPEC §6) and the sequence's index tensors (wherever they live:
// device or host). One home for cuda_drafter_sequence_step and its CPU twin
// (harness/cuda/drafter_step_twin.hpp), so that both run the trunk on the same coordinates.
#pragma once

#include <cstdint>

#include "cuda/trunk/layer.hpp"
#include "reference/drafter.hpp"

namespace dflash {

template <class Storage>
TrunkLayerContext<Storage> step_layer_context(const DrafterConfig& config, const DrafterDims& dims,
                                              const DrafterStepOptions& options, std::uint32_t sequence,
                                              const std::int64_t* anchors, const std::uint8_t* keep,
                                              const std::int64_t* block_positions,
                                              const std::int64_t* context_positions) {
  TrunkLayerContext<Storage> ctx;
  ctx.dims = dims;
  ctx.eps = static_cast<float>(config.rms_norm_eps);
  ctx.rope_theta = config.rope_theta;
  ctx.sliding_window = config.sliding_window.value_or(0);
  ctx.anchors = anchors;
  ctx.keep = keep;
  ctx.block_positions = block_positions;
  ctx.context_positions = context_positions;
  ctx.seed = config.seed;
  ctx.step = options.step;
  ctx.sequence = sequence;
  ctx.attention_dropout = config.attention_dropout;
  ctx.hidden_dropout = config.hidden_dropout;
  return ctx;
}

}  // namespace dflash
