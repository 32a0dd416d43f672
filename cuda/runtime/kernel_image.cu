#include "cuda/runtime/kernel_image.hpp"

namespace dflash {
namespace {

__global__ void kernel_image_probe_kernel() {}

}  // namespace

cudaError_t kernel_image_status() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, kernel_image_probe_kernel);
}

}  // namespace dflash
