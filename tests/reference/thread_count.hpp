// Test support: sets the reference's thread count for a scope and restores the previous one.
#pragma once

#include "reference/threads.hpp"

namespace dflash {

class ThreadCount {
 public:
  explicit ThreadCount(int threads) : saved_(reference_threads()) { set_reference_threads(threads); }
  ~ThreadCount() { set_reference_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

}  // namespace dflash
