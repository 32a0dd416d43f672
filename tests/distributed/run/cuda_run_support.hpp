// What the CPU tests of `dflash train --backend cuda` share: the run's options with the CUDA step's
// code on the CPU's training backend in place of the GPU's.
#pragma once

#include <filesystem>
#include <memory>

#include "distributed/run/device_step_backend.hpp"
#include "harness/cuda/host_training_backend.hpp"
#include "tests/distributed/run_test_support.hpp"

namespace dflash::train_testing {

// The CUDA run's options: --backend cuda, the step backend the CPU's twin; `memory` counts what it
// holds (as the device allocator would) and must outlive the run.
inline TrainingRunOptions cuda_options_for(const std::filesystem::path& out, MemoryTracker& memory) {
  TrainingRunOptions o = options_for(out);
  o.backend = TrainingBackend::cuda;
  o.make_step_backend = [&memory](Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                                  const FrozenWeightSource& frozen, TrainingState state) {
    return std::make_unique<DeviceStepBackend<HostTrainingBackend>>(
        HostTrainingBackend{memory}, CudaCommunicators{comm, comm}, config, training, frozen, state.optimizer);
  };
  return o;
}

}  // namespace dflash::train_testing
