// Every byte the CUDA path takes from the device goes through here and is counted by category
// (reference/memory_tracker.hpp: current and peak, the categories of a memory plan), so that a
// policy's device peak is measured, not asserted. Allocation is stream-ordered (cudaMallocAsync
// from the device's pool, which keeps freed memory for reuse instead of returning it at every
// synchronisation): a chunk's buffers cost no device-wide synchronisation. cudaMemGetInfo,
// reported beside the counts, sees what the pool holds, which is at least the counted peak.
#pragma once

#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>

#include "reference/memory_tracker.hpp"

namespace dflash {

struct DeviceMemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  std::size_t used_bytes() const { return total_bytes - free_bytes; }
};

DeviceMemoryInfo device_memory_info();  // cudaMemGetInfo on the current device

class DeviceAllocator {
 public:
  // Allocates and frees in order on `stream` (the legacy default stream when null).
  explicit DeviceAllocator(cudaStream_t stream = nullptr);
  // Waits for the stream, then hands the pool's unused memory back to the device.
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Null for 0 bytes. Throws CudaError (out of memory included) naming the call.
  void* allocate(MemoryCategory category, std::size_t bytes);
  // Throws CudaError when the device refuses.
  void release(MemoryCategory category, void* pointer, std::size_t bytes);
  // Moves counted bytes between categories (a saved gradient handed back to the caller).
  void recategorize(MemoryCategory from, MemoryCategory to, std::size_t bytes);

  const MemoryTracker& tracker() const { return tracker_; }
  void reset_peaks() { tracker_.reset_peaks(); }
  cudaStream_t stream() const { return stream_; }
  void synchronize() const;
  // Waits for the stream and hands the pool's free memory back to the device, so that
  // cudaMemGetInfo afterwards sees only what is allocated (the benchmark's per-policy peaks).
  void release_cached_memory();

  // The tracker's lines, then "device: used X B of Y B (cudaMemGetInfo)".
  std::string report() const;

 private:
  cudaMemPool_t pool() const;

  cudaStream_t stream_;
  int device_ = 0;
  MemoryTracker tracker_;
};

// Byte copies on the allocator's stream. Copies from and to the host wait for the stream.
void copy_to_device(const DeviceAllocator& allocator, void* device, const void* host, std::size_t bytes);
void copy_to_host(const DeviceAllocator& allocator, void* host, const void* device, std::size_t bytes);
void copy_on_device(const DeviceAllocator& allocator, void* to, const void* from, std::size_t bytes);
void zero_on_device(const DeviceAllocator& allocator, void* device, std::size_t bytes);

}  // namespace dflash
