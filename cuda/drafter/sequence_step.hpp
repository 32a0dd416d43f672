// One sequence of the drafter step on the GPU from device-resident inputs: the trunk forward
// (cuda/trunk/stack.hpp, under options.trunk_policy), the CUDA loss head forward and backward, and the
// trunk backward, accumulating every trainable gradient (fp32, +=) into `grads`. cuda_drafter_step
// (cuda/drafter/step.hpp) runs it per sequence after uploading the reference's host inputs;
// callers that build their inputs on the device (the full-scale benchmark: 27B-class frozen
// weights are 10 GB each in double) call it directly.
//
// Backend is the trunk's (CudaBackend, or a type derived from it: the benchmark's attention timer;
// HostBackend<Bf16Bits> on the CPU), Head the loss head on the matching backend (CudaLossHead;
// ChunkedLossHead<HostLossHeadBackend> on the CPU: tests/cuda/drafter/test_drafter_sequence_step_cpu.cpp
// runs this file's code in every CI).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/loss_head/chunked_head.hpp"
#include "cuda/runtime/bf16_bits.hpp"
#include "cuda/trunk/stack.hpp"
#include "cuda/trunk/step_context.hpp"
#include "reference/drafter.hpp"

namespace dflash {

// One sequence's inputs in the backend's memory (SPEC §2, §4: anchor slots and block rows as
// prepare_sequences makes them).
struct CudaSequenceInputs {
  const std::int64_t* anchors = nullptr;            // [N]
  const std::uint8_t* keep = nullptr;               // [N]
  const std::int64_t* block_positions = nullptr;    // [T] a_n + k
  const std::int64_t* context_positions = nullptr;  // [S] j
  const std::int64_t* input_tokens = nullptr;       // [T] tok(n, k)
  const Bf16Bits* features = nullptr;               // F [S, K H]
  const Bf16Bits* teacher_rows = nullptr;           // G[a_n + k - 1] per block row [T, H]
  DeviceRowTargets rows;                            // labels, weights, w01 [T]
  float* features_grad = nullptr;                   // dL/dF [S, K H] (fp32, +=); null: not wanted
};

// The frozen and trainable weights in the backend's memory, bound per parameter (bind_trunk_parameters).
struct CudaDrafterWeights {
  TrunkWeights<Bf16Bits> trunk;
  TrunkGrads grads;
  const Bf16Bits* lm_head = nullptr;  // W_lm [V, H]
};

namespace drafter_sequence_detail {

// The sequence's trunk under options.trunk_policy (returned by value: guaranteed elision).
template <class Backend>
Trunk<Backend> sequence_trunk(const Backend& backend, const DrafterConfig& config, const DrafterDims& dims,
                              const CudaDrafterWeights& weights, const CudaSequenceInputs& in,
                              const DrafterStepOptions& options, std::uint32_t sequence) {
  const TrunkLayerContext<Bf16Bits> ctx = step_layer_context<Bf16Bits>(
      config, dims, options, sequence, in.anchors, in.keep, in.block_positions, in.context_positions);
  return Trunk<Backend>(backend, weights.trunk, ctx, dims.K, in.features, in.input_tokens, options.trunk_policy,
                        options.checkpoint_every);
}

// The trunk forward, then the loss head's forward on its Y (freed once the head has read it).
template <class Backend, class Head>
typename Head::Forward sequence_forward(Trunk<Backend>& trunk, Head& head, const DrafterDims& dims,
                                        const CudaLossHeadTargets& targets, double weight_sum,
                                        std::vector<std::uint8_t>* hits) {
  auto y = trunk.forward();
  typename Head::Forward f = head.forward(y.data(), CudaLossHeadShape{dims.T, dims.H, dims.V}, targets, weight_sum);
  y.release();
  if (hits != nullptr) *hits = std::move(f.hits);
  return f;
}

}  // namespace drafter_sequence_detail

// Returns the sequence's loss statistics (over the global W, weight_sum); `hits`, when given,
// receives the loss head's per-row flags [T] (CudaLossHeadForward::hits).
template <class Backend, class Head>
LossHeadStats<double> cuda_drafter_sequence_step(const Backend& backend, Head& head, const DrafterConfig& config,
                                                 const DrafterDims& dims, const CudaDrafterWeights& weights,
                                                 const CudaSequenceInputs& in, const DrafterStepOptions& options,
                                                 std::uint32_t sequence, double weight_sum,
                                                 std::vector<std::uint8_t>* hits = nullptr) {
  TrunkGrads grads = weights.grads;
  grads.target_features = in.features_grad;
  Trunk<Backend> trunk = drafter_sequence_detail::sequence_trunk(backend, config, dims, weights, in, options, sequence);
  const CudaLossHeadTargets targets{in.teacher_rows, weights.lm_head, in.rows};
  typename Head::Forward f = drafter_sequence_detail::sequence_forward(trunk, head, dims, targets, weight_sum, hits);
  auto d_hidden = head.backward(targets, std::move(f.saved));
  GradientsFinal on_final;  // as the reference step: the observer learns the sequence too
  if (options.gradients_final != nullptr) {
    on_final = [&observer = *options.gradients_final, sequence](std::size_t first) { observer(sequence, first); };
  }
  trunk.backward(std::move(d_hidden), grads, on_final);
  return f.stats;
}

// The forward alone (evaluation, TRAINING §17): the trunk forward and the loss head's forward, no
// backward, so no gradient is made (dL/dY, dL/dF, the parameters' are not touched); what the
// policies keep for a backward is freed on return. Returns what cuda_drafter_sequence_step returns.
template <class Backend, class Head>
LossHeadStats<double> cuda_drafter_sequence_forward(const Backend& backend, Head& head, const DrafterConfig& config,
                                                    const DrafterDims& dims, const CudaDrafterWeights& weights,
                                                    const CudaSequenceInputs& in, const DrafterStepOptions& options,
                                                    std::uint32_t sequence, double weight_sum,
                                                    std::vector<std::uint8_t>* hits = nullptr) {
  Trunk<Backend> trunk = drafter_sequence_detail::sequence_trunk(backend, config, dims, weights, in, options, sequence);
  const CudaLossHeadTargets targets{in.teacher_rows, weights.lm_head, in.rows};
  return drafter_sequence_detail::sequence_forward(trunk, head, dims, targets, weight_sum, hits).stats;
}

}  // namespace dflash
