// GPU tests skip, with the reason, where no GPU is usable; where one must be (the device session:
// ci/gpu sets DFLASH_REQUIRE_GPU=1) they fail instead, so a broken setup never reads as a skip.
#pragma once

#include <memory>

#include <gtest/gtest.h>

#include "common/gpu_required.hpp"
#include "cuda/runtime/device_allocator.hpp"
#include "cuda/runtime/device_probe.hpp"

namespace dflash {

// In a test body or SetUp: skips, with the reason, where no GPU is usable (fails instead under
// DFLASH_REQUIRE_GPU=1).
#define DFLASH_SKIP_WITHOUT_GPU()                                                                \
  do {                                                                                           \
    const ::dflash::CudaDeviceStatus& gpu_status = ::dflash::cuda_device_status();               \
    if (!gpu_status.available) {                                                                 \
      if (::dflash::gpu_required()) FAIL() << "DFLASH_REQUIRE_GPU=1, but " << gpu_status.reason; \
      GTEST_SKIP() << gpu_status.reason;                                                         \
    }                                                                                            \
  } while (false)

// The fixture of every GPU test: SetUp skips (or fails) without a GPU, else makes an allocator.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DFLASH_SKIP_WITHOUT_GPU();
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
