// Does this build hold a kernel image the current device can run? Every kernel of the project is
// compiled for the same CMAKE_CUDA_ARCHITECTURES, so one empty kernel answers for all of them: on a
// device of another architecture (and no PTX to JIT from) cudaFuncGetAttributes fails with
// cudaErrorNoKernelImageForDevice, before any real kernel is launched.
#pragma once

#include <cuda_runtime_api.h>

namespace dflash {

// cudaSuccess when this build's kernels can run on the current device.
cudaError_t kernel_image_status();

}  // namespace dflash
