// A dense row-major tensor whose storage is counted by a MemoryTracker for as long as it lives.
// Move-only: a copy is an allocation, so it is spelled out (clone()). A double or bf16-bits
// tensor's storage comes from reference/storage_pool.hpp (reused blocks, zeroed like fresh ones; the
// tracker counts the tensor's bytes, not the pool's), any other element type's from malloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "io/errors.hpp"
#include "reference/memory_tracker.hpp"
#include "reference/storage_pool.hpp"

namespace dflash {

using Shape = std::vector<std::int64_t>;

inline std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

inline std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

template <class T>
class Tensor {
 public:
  // An empty tensor that owns nothing (a slot to move a real one into).
  Tensor() = default;
  Tensor(MemoryTracker& tracker, MemoryCategory category, Shape shape)
      : tracker_(&tracker), category_(category), shape_(std::move(shape)) {
    for (std::int64_t d : shape_) {
      if (d < 0) throw_input_error("tensor shape", shape_string(shape_) + " has a negative dimension");
    }
    data_ = zeroed(static_cast<std::size_t>(shape_numel(shape_)));
    tracker_->allocate(category_, bytes());
  }
  Tensor(MemoryTracker& tracker, MemoryCategory category, Shape shape, const std::vector<T>& values)
      : Tensor(tracker, category, std::move(shape)) {
    if (values.size() != data_.size()) {
      throw_input_error("tensor values", str(values.size(), " values for shape ", shape_string(shape_)));
    }
    data_ = values;
  }
  Tensor(Tensor&& other) noexcept
      : tracker_(std::exchange(other.tracker_, nullptr)),
        category_(other.category_),
        shape_(std::move(other.shape_)),
        data_(std::move(other.data_)) {}
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      release();
      tracker_ = std::exchange(other.tracker_, nullptr);
      category_ = other.category_;
      shape_ = std::move(other.shape_);
      data_ = std::move(other.data_);
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { release(); }

  // A copy counted by `tracker` (whoever keeps the copy pays for it).
  Tensor clone(MemoryTracker& tracker, MemoryCategory category) const {
    Tensor copy(tracker, category, shape_);
    copy.data_ = data_;
    return copy;
  }
  // A copy counted by this tensor's own tracker.
  Tensor clone(MemoryCategory category) const { return clone(*tracker_, category); }

  // Frees the storage now (the tensor becomes empty); destruction does the same.
  void release() {
    if (tracker_ != nullptr) tracker_->release(category_, bytes());
    tracker_ = nullptr;
    if constexpr (kPooled) {
      recycle_storage(data_);
    } else {
      data_.clear();
      data_.shrink_to_fit();
    }
    shape_.clear();
  }

  // Moves the bytes from one category to another (a saved gradient handed back, say).
  void recategorize(MemoryCategory category) {
    tracker_->release(category_, bytes());
    category_ = category;
    tracker_->allocate(category_, bytes());
  }

  const Shape& shape() const { return shape_; }
  std::int64_t dim(std::size_t axis) const { return shape_.at(axis); }
  std::size_t rank() const { return shape_.size(); }
  std::int64_t numel() const { return static_cast<std::int64_t>(data_.size()); }
  std::size_t bytes() const { return data_.size() * sizeof(T); }
  MemoryCategory category() const { return category_; }
  MemoryTracker& tracker() const { return *tracker_; }

  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  T& operator[](std::int64_t i) { return data_[static_cast<std::size_t>(i)]; }
  const T& operator[](std::int64_t i) const { return data_[static_cast<std::size_t>(i)]; }

  // Row i of a tensor viewed as [dim(0), numel/dim(0)].
  std::int64_t row_size() const { return shape_.empty() || shape_[0] == 0 ? 0 : numel() / shape_[0]; }
  T* row(std::int64_t i) { return data() + i * row_size(); }
  const T* row(std::int64_t i) const { return data() + i * row_size(); }

  const std::vector<T>& values() const { return data_; }
  std::span<const T> span() const { return std::span<const T>(data_.data(), data_.size()); }

 private:
  // double and bf16 bits (storage_pool.hpp): the 50-digit judge keeps the plain path, and the other
  // types' tensors are small.
  static constexpr bool kPooled = kPooledElement<T>;
  static std::vector<T> zeroed(std::size_t n) {
    if constexpr (kPooled) {
      return zeroed_storage<T>(n);
    } else {
      return std::vector<T>(n, T{});  // value-initialised: 0 for numbers, members zeroed for records
    }
  }

  MemoryTracker* tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::transient;
  Shape shape_;
  std::vector<T> data_;
};

}  // namespace dflash
