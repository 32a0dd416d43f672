// A typed device array that owns its bytes for as long as it lives and has them counted by a
// DeviceAllocator under one category. Move-only: a copy is an allocation, so it is spelled out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "cuda/runtime/device_allocator.hpp"
#include "io/errors.hpp"

namespace dflash {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceAllocator& allocator, MemoryCategory category, std::size_t count)
      : allocator_(&allocator), category_(category), count_(count) {
    data_ = static_cast<T*>(allocator.allocate(category, bytes()));
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : allocator_(std::exchange(other.allocator_, nullptr)),
        category_(other.category_),
        count_(std::exchange(other.count_, 0)),
        data_(std::exchange(other.data_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release_quietly();
      allocator_ = std::exchange(other.allocator_, nullptr);
      category_ = other.category_;
      count_ = std::exchange(other.count_, 0);
      data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release_quietly(); }

  // Frees the bytes now (the buffer becomes empty). Throws CudaError if the device refuses.
  void release() {
    if (allocator_ != nullptr) allocator_->release(category_, data_, bytes());
    allocator_ = nullptr;
    data_ = nullptr;
    count_ = 0;
  }

  void recategorize(MemoryCategory category) {
    allocator_->recategorize(category_, category, bytes());
    category_ = category;
  }

  void upload(std::span<const T> values) {
    if (values.size() != count_) {
      throw_input_error("device upload", str(values.size(), " values for a buffer of ", count_));
    }
    copy_to_device(*allocator_, data_, values.data(), bytes());
  }
  std::vector<T> download() const {
    std::vector<T> values(count_);
    if (count_ > 0) copy_to_host(*allocator_, values.data(), data_, bytes());
    return values;
  }
  void zero() { zero_on_device(*allocator_, data_, bytes()); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  MemoryCategory category() const { return category_; }
  bool empty() const { return allocator_ == nullptr; }

 private:
  // Destruction cannot throw: a failure to free was caused by an earlier, already reported error.
  void release_quietly() noexcept {
    try {
      release();
    } catch (...) {}
  }

  DeviceAllocator* allocator_ = nullptr;
  MemoryCategory category_ = MemoryCategory::transient;
  std::size_t count_ = 0;
  T* data_ = nullptr;
};

// What a backend on one allocator (CudaBackend, the trunk's; CudaLossHeadBackend, the loss head's)
// does with memory: makes buffers, fills them from and reads them back to the host, copies within
// the device. Every call runs on the allocator's stream; a read back waits for it.
struct DeviceMemory {
  template <class T>
  using Buffer = DeviceBuffer<T>;

  DeviceAllocator& allocator;

  cudaStream_t stream() const { return allocator.stream(); }
  template <class T>
  Buffer<T> buffer(MemoryCategory category, std::size_t n) const {
    return Buffer<T>(allocator, category, n);
  }
  template <class T>
  Buffer<T> from_host(MemoryCategory category, std::span<const T> values) const {
    Buffer<T> b(allocator, category, values.size());
    b.upload(values);
    return b;
  }
  template <class T>
  Buffer<T> from_host(MemoryCategory category, const std::vector<T>& values) const {
    return from_host(category, std::span<const T>(values));
  }
  template <class T>
  std::vector<T> to_host(const Buffer<T>& b) const {
    return b.download();
  }
  // array[index], one value back to the host.
  template <class T>
  T element(const T* array, std::int64_t index) const {
    T value{};
    copy_to_host(allocator, &value, array + index, sizeof(T));
    return value;
  }
  void copy(void* to, const void* from, std::size_t bytes) const { copy_on_device(allocator, to, from, bytes); }
};

}  // namespace dflash
