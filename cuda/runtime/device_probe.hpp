// Is there a GPU this build can run on? Asked once per process by every GPU test, the verify rows
// and the benchmark: without one they skip (never pass) and say why.
#pragma once

#include <cstddef>
#include <string>

namespace dflash {

struct CudaDeviceStatus {
  bool available = false;
  std::string reason;  // why not, when !available ("cudaGetDeviceCount: cudaErrorInsufficientDriver ...")
  std::string name;    // the current device's
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  std::size_t total_bytes = 0;

  std::string summary() const;  // "NVIDIA H200, sm_90, 132 SMs, 143771 MiB" or the reason
};

// The current device (cudaGetDevice; device 0 unless the process chose another first): count,
// properties, a cuBLAS handle, and a kernel image of this build for its architecture. Probed once;
// later calls return the same answer.
const CudaDeviceStatus& cuda_device_status();

}  // namespace dflash
