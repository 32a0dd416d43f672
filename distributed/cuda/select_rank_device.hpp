// This process's GPU, made current: rank_device.hpp's rule on the GPUs the CUDA runtime shows it
// (rank_device.hpp stays free of CUDA, for its CPU test).
#pragma once

#include <cuda_runtime_api.h>

#include <optional>

#include "distributed/cuda/rank_device.hpp"

namespace dflash {

// rank_device's GPU made current for this process, before anything touches a device (a probe or a
// context on device 0 would cost every rank memory on GPU 0, and fail on GPUs in exclusive-process
// mode); nullopt when it has none it can use (the device probe then says why).
inline std::optional<int> select_rank_device(int node_local_rank) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) return std::nullopt;
  const std::optional<int> device = rank_device(node_local_rank, devices);
  if (!device || cudaSetDevice(*device) != cudaSuccess) return std::nullopt;
  return device;
}

}  // namespace dflash
