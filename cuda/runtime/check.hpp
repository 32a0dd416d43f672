// Every CUDA runtime and cuBLAS status is checked and turned into an exception that says which
// call failed, where, and why. An unchecked status is a silent wrong answer on the next line.
#pragma once

#include <stdexcept>
#include <string>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace dflash {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "CUDA error cudaErrorMemoryAllocation (out of memory) in cudaMallocAsync(...) at file:line"
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}
inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, call, file, line);
}

}  // namespace dflash

#define DFLASH_CUDA_CHECK(call) ::dflash::check_cuda((call), #call, __FILE__, __LINE__)
#define DFLASH_CUBLAS_CHECK(call) ::dflash::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad launch configuration is reported by the next runtime call, so ask
// now and name the kernel.
#define DFLASH_CUDA_CHECK_LAUNCH(kernel_name) \
  ::dflash::check_cuda(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
