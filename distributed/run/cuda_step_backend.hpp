// `dflash train --backend cuda`: the CUDA step (distributed/cuda/train_step.hpp) behind the run
// loop's StepBackend. Ranks: a plain start (the single-process communicator) is R = 1 with the
// single-process communicator on the device too; under mpirun/srun (the MPI communicator) the
// device collectives go through NCCL, one GPU per node-local rank. Built without CUDA (or, for
// R > 1, without NCCL), both functions refuse with an InputError naming --backend.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "distributed/run/step_backend.hpp"

namespace dflash {

// The GPU memory the plan gate holds the CUDA step to: the smallest total memory of the ranks' GPUs
// (each rank's own, distributed/cuda/rank_device.hpp), so that a card smaller than SPEC §1's 95 GB
// (an 80 GB H100) refuses the run at its start, not out of memory in step 0, and a larger one (a
// 141 GB H200) is not held to 95 GB. nullopt when a rank finds no GPU, or in a build without CUDA
// (the run then prints its plan against 95 GB and stops at require_cuda_training_available). A
// collective over `comm` (in a CUDA build).
std::optional<std::int64_t> cuda_device_bytes(Communicator& comm);

// Throws InputError naming --backend when this build or this machine cannot run the CUDA step:
// built without CUDA, or no usable GPU (the probe's reason). The run calls it after the plan gate.
// A rank takes its GPU first (rank_device.hpp), so that the probe's context is made there, not on
// GPU 0.
void require_cuda_training_available(Communicator& comm);

// The CUDA backend from this rank's host state (fresh or restored: its optimizer part is rounded
// to fp32 and put on the device; the host copy is freed; its parameters are not read). The frozen
// weights are read from `frozen` while it is made, a piece at a time, into bf16 copies on the
// device; comm, config and training must outlive it.
std::unique_ptr<StepBackend> make_cuda_step_backend(Communicator& comm, const DrafterConfig& config,
                                                    const TrainingConfig& training, const FrozenWeightSource& frozen,
                                                    TrainingState state);

}  // namespace dflash
