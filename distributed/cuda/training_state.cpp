#include "distributed/cuda/training_state.hpp"

#include "distributed/cuda/training_backend.hpp"

namespace dflash {

// Compiled once for the GPU (train_step.hpp declares it extern).
template class DeviceTrainingState<CudaTrainingBackend>;

}  // namespace dflash
