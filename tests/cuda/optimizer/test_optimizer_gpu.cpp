// The optimizer kernels (cuda/optimizer/adamw_kernels.hpp) on the device against their programs run on
// the host (tests/cuda/optimizer/test_support.hpp): the squared norm and the bf16 cast bitwise, the
// AdamW update within the fp32 rule of the double reference (nvcc may contract the update's
// products into FMAs, so it need not match the host program's bits). The norm stays bitwise:
// double(g) double(g) is exact in double, so an FMA rounds the same sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/optimizer/adamw_kernels.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "tests/cuda/optimizer/test_support.hpp"

namespace dflash {
namespace {

// 1024 norm blocks of several elements per thread, and a tail that is not a multiple of 256.
constexpr std::int64_t kCount = 300037;

using OptimizerGpu = GpuTest;

template <class T>
DeviceBuffer<T> upload(DeviceAllocator& a, const std::vector<T>& host) {
  DeviceBuffer<T> buffer(a, MemoryCategory::transient, host.size());
  buffer.upload(host);
  return buffer;
}

double squared_norm_on_device(DeviceAllocator& a, const DeviceBuffer<float>& g) {
  const std::int64_t n = std::int64_t(g.size());
  DeviceBuffer<double> partials(a, MemoryCategory::transient, std::size_t(norm_blocks(n)));
  DeviceBuffer<double> norm2(a, MemoryCategory::transient, 1);
  launch_squared_norm_partials(g.data(), n, partials.data(), nullptr);
  launch_squared_norm_finish(partials.data(), norm_blocks(n), norm2.data(), nullptr);
  return norm2.download()[0];
}

TEST_F(OptimizerGpu, NormCastAndThreeAdamWStepsMatchTheHost) {
  const TestAdamW h;
  const TestFlat flat(kCount);
  std::vector<float> theta = random_floats(kCount, 2, 0.5f);
  DoubleAdamW reference(theta, flat, h);
  DeviceBuffer<float> d_theta = upload(allocator(), theta);
  DeviceBuffer<float> d_m(allocator(), MemoryCategory::transient, kCount),
      d_v(allocator(), MemoryCategory::transient, kCount);
  d_m.zero();
  d_v.zero();
  DeviceBuffer<std::int64_t> d_ends = upload(allocator(), flat.ends);
  DeviceBuffer<unsigned char> d_decay = upload(allocator(), flat.decay);
  const DecayTable table{d_ends.data(), d_decay.data(), int(flat.ends.size())};
  for (int t = 0; t < 3; ++t) {
    const std::vector<float> g = random_floats(kCount, 10 + unsigned(t), 1.0f);
    const DeviceBuffer<float> d_g = upload(allocator(), g);
    const double norm2 = squared_norm_on_device(allocator(), d_g);
    ASSERT_EQ(norm2, squared_norm_on_host(g, false)) << "step " << t;
    const double clip = clip_coefficient(std::sqrt(norm2), h.max_norm);
    ASSERT_LT(clip, 1.0) << "clipping is active";
    reference.step(g, clip, t);
    launch_adamw_step(adamw_range(d_theta.data(), d_m.data(), d_v.data(), d_g.data(), kCount, clip, h, t, table),
                      nullptr);
    ASSERT_TRUE(reference.within_fp32_rule(d_theta.download(), d_m.download(), d_v.download())) << "step " << t;
  }
  DeviceBuffer<std::uint16_t> d_working(allocator(), MemoryCategory::transient, kCount);
  launch_bf16_copy(d_theta.data(), kCount, d_working.data(), nullptr);
  const std::vector<float> master = d_theta.download();
  std::vector<std::uint16_t> expected(kCount);
  elementwise_on_host(kCount, false, [&](std::int64_t i) { bf16_copy_at(i, master.data(), expected.data()); });
  EXPECT_EQ(d_working.download(), expected);
}

// Bad sizes are refused on the host before any launch (no GPU needed), naming the argument.
template <class Launch>
void expect_refused(Launch launch, const std::string& names) {
  try {
    launch();
    ADD_FAILURE() << "not refused: " << names;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
}

TEST(OptimizerKernels, RefusesANegativeNormSize) {
  expect_refused([] { launch_squared_norm_partials(nullptr, -1, nullptr, nullptr); }, "norm size -1");
}

TEST(OptimizerKernels, RefusesANormPartialCountOutsideTheTree) {
  expect_refused([] { launch_squared_norm_finish(nullptr, kNormMaxBlocks + 1, nullptr, nullptr); },
                 "norm partial count 1025");
}

TEST(OptimizerKernels, RefusesAnInvertedAdamWRange) {
  AdamWRange range{};
  range.begin = 5, range.end = 3;
  expect_refused([&] { launch_adamw_step(range, nullptr); }, "AdamW range [5, 3)");
}

TEST(OptimizerKernels, RefusesAnEmptyDecayTable) {
  AdamWRange range{};
  range.begin = 0, range.end = 3;
  expect_refused([&] { launch_adamw_step(range, nullptr); }, "AdamW decay table count 0");
}

TEST(OptimizerKernels, RefusesANegativeCastSize) {
  expect_refused([] { launch_bf16_copy(nullptr, -2, nullptr, nullptr); }, "bf16 copy size -2");
}

}  // namespace
}  // namespace dflash
