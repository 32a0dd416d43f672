// GPU tests skip, with the reason, where no GPU is usable; where one must be (the device session:
// ci/gpu sets DFLASH_REQUIRE_GPU=1) they fail instead, so a broken setup never reads as a skip.
#pragma once

#include <memory>

#include <gtest/gtest.h>

#include "common/gpu_required.hpp"
#include "cuda/device_allocator.hpp"
#include "cuda/device_probe.hpp"

namespace dflash {

// The fixture of every GPU test: SetUp skips (or fails) without a GPU, else makes an allocator.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaDeviceStatus& gpu = cuda_device_status();
    if (!gpu.available) {
      if (gpu_required()) FAIL() << "DFLASH_REQUIRE_GPU=1, but " << gpu.reason;
      GTEST_SKIP() << gpu.reason;
    }
    allocator_ = std::make_unique<DeviceAllocator>();
  }

  DeviceAllocator& allocator() { return *allocator_; }

 private:
  // Destroyed with the fixture, after a derived fixture's own members: device buffers a fixture
  // holds (CudaLossHeadInputs) are freed while their allocator still exists. (Resetting it in
  // TearDown, which runs before any member is destroyed, left those buffers a dangling allocator.)
  std::unique_ptr<DeviceAllocator> allocator_;
};

}  // namespace dflash
