// The device allocator counts every byte by category; buffers own their bytes; a refused
// allocation is an exception naming the call, and counts nothing.
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cuda/runtime/check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "harness/cuda/gpu_test_support.hpp"

namespace dflash {
namespace {

using CudaDeviceMemory = GpuTest;

TEST_F(CudaDeviceMemory, CountsCurrentAndPeakByCategory) {
  {
    DeviceBuffer<float> a(allocator(), MemoryCategory::transient, 1000);
    DeviceBuffer<std::uint16_t> b(allocator(), MemoryCategory::loss_saved, 300);
    EXPECT_EQ(allocator().tracker().current(MemoryCategory::transient), 4000u);
    EXPECT_EQ(allocator().tracker().current(MemoryCategory::loss_saved), 600u);
    EXPECT_EQ(allocator().tracker().current_total(), 4600u);
    a.release();
    EXPECT_EQ(allocator().tracker().current(MemoryCategory::transient), 0u);
    EXPECT_EQ(allocator().tracker().peak(MemoryCategory::transient), 4000u);
    b.recategorize(MemoryCategory::gradients);
    EXPECT_EQ(allocator().tracker().current(MemoryCategory::loss_saved), 0u);
    EXPECT_EQ(allocator().tracker().current(MemoryCategory::gradients), 600u);
  }
  EXPECT_EQ(allocator().tracker().current_total(), 0u);
  EXPECT_EQ(allocator().tracker().peak_total(), 4600u);
}

TEST_F(CudaDeviceMemory, MovingABufferMovesItsBytesWithoutCountingThemTwice) {
  DeviceBuffer<int> a(allocator(), MemoryCategory::inputs, 64);
  DeviceBuffer<int> b = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(b.size(), 64u);
  EXPECT_EQ(allocator().tracker().current(MemoryCategory::inputs), 256u);
  DeviceBuffer<int> c(allocator(), MemoryCategory::inputs, 8);
  c = std::move(b);  // c's old 8 ints are freed
  EXPECT_EQ(allocator().tracker().current(MemoryCategory::inputs), 256u);
}

TEST_F(CudaDeviceMemory, UploadAndDownloadRoundTrip) {
  std::vector<std::int64_t> values(1001);
  std::iota(values.begin(), values.end(), -500);
  DeviceBuffer<std::int64_t> buffer(allocator(), MemoryCategory::inputs, values.size());
  buffer.upload(values);
  EXPECT_EQ(buffer.download(), values);
  buffer.zero();
  EXPECT_EQ(buffer.download(), std::vector<std::int64_t>(values.size(), 0));
}

TEST_F(CudaDeviceMemory, UploadOfTheWrongSizeIsAnInputError) {
  DeviceBuffer<float> buffer(allocator(), MemoryCategory::inputs, 4);
  const std::vector<float> three(3, 1.0f);
  EXPECT_THROW(buffer.upload(three), InputError);
}

TEST_F(CudaDeviceMemory, ARefusedAllocationThrowsNamingTheCallAndCountsNothing) {
  try {
    allocator().allocate(MemoryCategory::transient, std::size_t(1) << 62);
    FAIL() << "an allocation of 4 EiB succeeded";
  } catch (const CudaError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cudaMallocAsync"), std::string::npos) << m;
    EXPECT_NE(m.find("device_allocator.cpp:"), std::string::npos) << m;
  }
  EXPECT_EQ(allocator().tracker().current_total(), 0u);
  // Reported once: the runtime's last error is cleared, so the next launch check does not blame
  // an innocent kernel; and the device is still usable.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_NO_THROW(DeviceBuffer<float>(allocator(), MemoryCategory::transient, 16));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// cudaMemGetInfo, reported beside the counts, sees at least what is counted.
TEST_F(CudaDeviceMemory, DeviceMemoryInfoSeesTheCountedBytes) {
  DeviceBuffer<unsigned char> big(allocator(), MemoryCategory::transient, std::size_t(256) << 20);
  const DeviceMemoryInfo info = device_memory_info();
  EXPECT_GT(info.total_bytes, 0u);
  EXPECT_LE(info.free_bytes, info.total_bytes);
  EXPECT_GE(info.used_bytes(), allocator().tracker().current_total());
  const std::string report = allocator().report();
  EXPECT_NE(report.find("transient"), std::string::npos) << report;
  EXPECT_NE(report.find("cudaMemGetInfo"), std::string::npos) << report;
}

}  // namespace
}  // namespace dflash
