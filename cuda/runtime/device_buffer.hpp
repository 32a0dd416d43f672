// A typed device array that owns its bytes for as long as it lives and has them counted by a
// DeviceAllocator under one category. Move-only: a copy is an allocation, so it is spelled out.
#pragma once

#include <cstddef>
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

}  // namespace dflash
