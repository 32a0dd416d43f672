#include "cuda/runtime/device_allocator.hpp"

#include <cstdint>
#include <limits>

#include "cuda/runtime/check.hpp"
#include "io/errors.hpp"

namespace dflash {

DeviceMemoryInfo device_memory_info() {
  DeviceMemoryInfo info;
  DFLASH_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

DeviceAllocator::DeviceAllocator(cudaStream_t stream) : stream_(stream) {
  DFLASH_CUDA_CHECK(cudaGetDevice(&device_));
  std::uint64_t keep_all = std::numeric_limits<std::uint64_t>::max();
  DFLASH_CUDA_CHECK(cudaMemPoolSetAttribute(pool(), cudaMemPoolAttrReleaseThreshold, &keep_all));
}

cudaMemPool_t DeviceAllocator::pool() const {
  cudaMemPool_t pool;
  DFLASH_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  return pool;
}

void DeviceAllocator::release_cached_memory() {
  synchronize();
  DFLASH_CUDA_CHECK(cudaMemPoolTrimTo(pool(), 0));
}

DeviceAllocator::~DeviceAllocator() {
  // Errors here were already reported by the call that caused them; a destructor cannot throw.
  cudaStreamSynchronize(stream_);
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, device_) == cudaSuccess) cudaMemPoolTrimTo(pool, 0);
}

void* DeviceAllocator::allocate(MemoryCategory category, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* pointer = nullptr;
  DFLASH_CUDA_CHECK(cudaMallocAsync(&pointer, bytes, stream_));
  tracker_.allocate(category, bytes);
  return pointer;
}

void DeviceAllocator::release(MemoryCategory category, void* pointer, std::size_t bytes) {
  if (pointer == nullptr) return;
  tracker_.release(category, bytes);
  DFLASH_CUDA_CHECK(cudaFreeAsync(pointer, stream_));
}

void DeviceAllocator::recategorize(MemoryCategory from, MemoryCategory to, std::size_t bytes) {
  tracker_.release(from, bytes);
  tracker_.allocate(to, bytes);
}

void DeviceAllocator::synchronize() const { DFLASH_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

std::string DeviceAllocator::report() const {
  const DeviceMemoryInfo info = device_memory_info();
  return tracker_.report() +
         str("device: used ", info.used_bytes(), " B of ", info.total_bytes, " B (cudaMemGetInfo)\n");
}

void copy_to_device(const DeviceAllocator& allocator, void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  DFLASH_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, allocator.stream()));
  allocator.synchronize();  // the host memory may be reused as soon as this returns
}

void copy_to_host(const DeviceAllocator& allocator, void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  DFLASH_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, allocator.stream()));
  allocator.synchronize();
}

void copy_on_device(const DeviceAllocator& allocator, void* to, const void* from, std::size_t bytes) {
  if (bytes == 0) return;
  DFLASH_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, allocator.stream()));
}

void zero_on_device(const DeviceAllocator& allocator, void* device, std::size_t bytes) {
  if (bytes == 0) return;
  DFLASH_CUDA_CHECK(cudaMemsetAsync(device, 0, bytes, allocator.stream()));
}

}  // namespace dflash
