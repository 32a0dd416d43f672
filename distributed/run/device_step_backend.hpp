// The CUDA step (distributed/cuda/train_step_loop.hpp) behind the run loop's StepBackend, over a
// training backend: the GPU's (CudaTrainingBackend, cuda_step_backend.cpp: `dflash train --backend
// cuda`) or the CPU's twin (harness/cuda/host_training_backend.hpp), with which the CPU tests run
// `dflash train`'s CUDA path end to end: checkpoints in F32, resume, evaluation on the working copy.
// A training backend here also has the forward alone (drafter_forward_sequences), its memory
// counts (counts) and reset_peaks.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "distributed/cuda/train_step_loop.hpp"
#include "distributed/cuda/training_state.hpp"
#include "distributed/run/step_backend.hpp"

namespace dflash {

template <class Backend>
class DeviceStepBackend : public StepBackend {
 public:
  // From this rank's host optimizer state (fresh or restored): rounded to fp32 into the backend's
  // memory; the frozen weights are read here alone, a piece at a time, into bf16 copies
  // (upload_frozen_bf16). comm, config and training must outlive it.
  DeviceStepBackend(Backend backend, CudaCommunicators comms, const DrafterConfig& config,
                    const TrainingConfig& training, const FrozenWeightSource& frozen, const OptimizerState& state)
      : config_(config), training_(training), state_(backend, comms, config, training, frozen, state) {}
  DeviceStepBackend(Backend backend, CudaCommunicators comms, const DrafterConfig& config,
                    const TrainingConfig& training, const FrozenWeights<double>& frozen, const OptimizerState& state)
      : DeviceStepBackend(backend, comms, config, training, FrozenWeightsInMemory(frozen), state) {}

  std::int64_t completed_steps() const override { return state_.step(); }
  // The forward alone on the resident working copy, with the host checks the step runs first.
  SequenceEvaluation forward_statistics(const DrafterConfig& config, const DrafterBatch<double>& batch,
                                        const DrafterStepOptions& options,
                                        const Bf16Features* bf16 = nullptr) override {
    const RankSequences s{options.sequence_offset, &batch, bf16};
    validate_rank_sequences(config, s, options);
    const LossHeadOptions loss_options = validate_drafter_step_options(config, options);
    const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, batch, options);
    validate_rank_teacher_rows(s, seqs);
    std::vector<std::vector<std::uint8_t>> hits;
    SequenceEvaluation e{state_.backend().drafter_forward_sequences(host_tracker_, config, state_.weights(), batch,
                                                                    options, loss_options, seqs, 1.0, &hits, bf16),
                         0.0, BlockStatistics(config.block_size)};
    for (std::size_t b = 0; b < seqs.size(); ++b) {
      for (const double w : seqs[b].blocks.weights) e.weight_sum += w;
      add_block_hits(e.blocks, config.block_size, seqs[b].slots.keep, seqs[b].blocks.valid, hits[b]);
    }
    return e;
  }
  StepMetrics step(std::span<const RankSequences> sequences, const TrainStepOptions& options) override {
    return train_step_on(host_tracker_, state_, config_, training_, sequences, options);
  }
  // Only the rank that asks reads the gathered vector back to the host, in fp32 as it is held.
  FlatValues gather_optimizer(OptimizerPart part, bool to_this_rank) override {
    return state_.gather_full_fp32(part, to_this_rank);
  }
  safetensors::Dtype master_dtype() const override { return safetensors::Dtype::F32; }
  bool reads_features_as_bf16() const override { return true; }
  std::map<std::string, std::int64_t> peak_bytes() const override { return peak_bytes_of(state_.backend().counts()); }
  void reset_peaks() override { state_.backend().reset_peaks(); }

 private:
  const DrafterConfig& config_;
  const TrainingConfig& training_;
  MemoryTracker host_tracker_;
  DeviceTrainingState<Backend> state_;
};

}  // namespace dflash
