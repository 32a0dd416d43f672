#include "distributed/cuda/train_step.hpp"

#include "distributed/cuda/train_step_loop.hpp"

namespace dflash {

StepMetrics cuda_train_step(MemoryTracker& host, CudaTrainingState& state, const DrafterConfig& config,
                            const TrainingConfig& training, std::span<const RankSequences> sequences,
                            const TrainStepOptions& options) {
  return train_step_on(host, state, config, training, sequences, options);
}

}  // namespace dflash
