#include "cuda/runtime/check.hpp"

#include "io/errors.hpp"

namespace dflash {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // The runtime also keeps this status as its "last error": reported here, it must not be
  // reported again by the next launch check (after a caught out-of-memory, say).
  cudaGetLastError();
  throw CudaError(str("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") in ", call, " at ",
                      file, ":", line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw CudaError(str("cuBLAS error ", cublasGetStatusName(status), " (", cublasGetStatusString(status), ") in ", call,
                      " at ", file, ":", line));
}

}  // namespace dflash
