#include "cuda/runtime/device_probe.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/runtime/kernel_image.hpp"
#include "io/errors.hpp"

namespace dflash {
namespace {

std::string describe(const char* call, cudaError_t status) {
  return str(call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

CudaDeviceStatus probe() {
  CudaDeviceStatus s;
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    s.reason = describe("cudaGetDeviceCount", e) + ": no usable GPU on this machine";
    return s;
  }
  if (count == 0) {
    s.reason = "cudaGetDeviceCount found 0 devices: no GPU on this machine";
    return s;
  }
  // The current device: a rank has selected its own (distributed/cuda/rank_device.hpp) before the
  // run asks, and the kernel image and cuBLAS below are checked on that one.
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
    s.reason = describe("cudaGetDevice", e);
    return s;
  }
  cudaDeviceProp prop{};
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    s.reason = describe("cudaGetDeviceProperties", e);
    return s;
  }
  s.name = prop.name;
  s.compute_major = prop.major;
  s.compute_minor = prop.minor;
  s.multiprocessors = prop.multiProcessorCount;
  s.total_bytes = prop.totalGlobalMem;
  if (const cudaError_t e = kernel_image_status(); e != cudaSuccess) {
    s.reason = describe("loading this build's kernels", e) +
               str(" on ", s.name, " (sm_", prop.major, prop.minor,
                   "): rebuild with CMAKE_CUDA_ARCHITECTURES=", prop.major, prop.minor);
    return s;
  }
  cublasHandle_t handle = nullptr;
  if (const cublasStatus_t e = cublasCreate(&handle); e != CUBLAS_STATUS_SUCCESS) {
    s.reason = str("cublasCreate failed: ", cublasGetStatusName(e), " (", cublasGetStatusString(e), ")");
    return s;
  }
  cublasDestroy(handle);
  s.available = true;
  return s;
}

}  // namespace

std::string CudaDeviceStatus::summary() const {
  if (!available) return "no GPU: " + reason;
  return str(name, ", sm_", compute_major, compute_minor, ", ", multiprocessors, " SMs, ", total_bytes >> 20, " MiB");
}

const CudaDeviceStatus& cuda_device_status() {
  static const CudaDeviceStatus status = probe();
  return status;
}

}  // namespace dflash
