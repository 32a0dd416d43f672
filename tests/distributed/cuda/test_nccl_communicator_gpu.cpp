// The NCCL communicator's collectives on device buffers, on however many ranks mpirun started (one
// GPU each): ci/gpu runs it on one rank, `ci/gpu run --stage multi` on every GPU of the machine.
// Each rank's values depend on its rank, so a wrong block, root or reduction shows. Skipped with the reason
// without a GPU (failed instead under DFLASH_REQUIRE_GPU=1).
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "cuda/runtime/device_probe.hpp"
#include "distributed/cuda/nccl_communicator.hpp"
#include "distributed/cuda/select_rank_device.hpp"
#include "harness/mpi_world.hpp"

namespace dflash::testing {
namespace {

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    select_rank_device(world().node_local_rank());  // this rank's GPU before the probe touches one
    const CudaDeviceStatus& gpu = cuda_device_status();
    if (!gpu.available) {
      const char* required = std::getenv("DFLASH_REQUIRE_GPU");
      if (required != nullptr && std::string_view(required) == "1")
        FAIL() << "DFLASH_REQUIRE_GPU=1, but " << gpu.reason;
      GTEST_SKIP() << gpu.reason;
    }
    nccl_ = std::make_unique<NcclCommunicator>(world());
  }
  // Host values to a device buffer and back.
  struct DeviceDoubles {
    explicit DeviceDoubles(const std::vector<double>& v) : n(v.size()) {
      EXPECT_EQ(cudaMalloc(&p, n * sizeof(double)), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(p, v.data(), n * sizeof(double), cudaMemcpyHostToDevice), cudaSuccess);
    }
    ~DeviceDoubles() { cudaFree(p); }
    std::vector<double> host() const {
      std::vector<double> v(n);
      EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(double), cudaMemcpyDeviceToHost), cudaSuccess);
      return v;
    }
    double* p = nullptr;
    std::size_t n;
  };
  std::unique_ptr<NcclCommunicator> nccl_;
};

TEST_F(NcclTest, CollectivesFollowTheInterfacesConventions) {
  const int R = nccl_->size(), r = nccl_->rank();
  const std::size_t n = 5;
  std::vector<double> mine(n * std::size_t(R));
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = 100.0 * r + double(i);
  {  // all-reduce sum, in place
    DeviceDoubles d(mine);
    nccl_->all_reduce(d.p, d.p, d.n, CommType::f64, CommOp::sum);
    const std::vector<double> got = d.host();
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 100.0 * R * (R - 1) / 2 + R * double(i));
  }
  {  // reduce-scatter in place: rank r's block of the send buffer receives block r's sums
    DeviceDoubles d(mine);
    nccl_->reduce_scatter(d.p, d.p + std::size_t(r) * n, n, CommType::f64, CommOp::sum);
    const std::vector<double> got = d.host();
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(got[std::size_t(r) * n + i], 100.0 * R * (R - 1) / 2 + R * double(std::size_t(r) * n + i));
    }
  }
  {  // all-gather in place: block q from rank q
    std::vector<double> blocks(n * std::size_t(R), -1.0);
    for (std::size_t i = 0; i < n; ++i) blocks[std::size_t(r) * n + i] = 10.0 * r + double(i);
    DeviceDoubles d(blocks);
    nccl_->all_gather(d.p + std::size_t(r) * n, d.p, n, CommType::f64);
    const std::vector<double> got = d.host();
    for (int q = 0; q < R; ++q) {
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(got[std::size_t(q) * n + i], 10.0 * q + double(i));
    }
  }
  {  // broadcast from the last rank
    DeviceDoubles d(std::vector<double>(n, double(r)));
    nccl_->broadcast(d.p, n, CommType::f64, R - 1);
    for (double v : d.host()) EXPECT_EQ(v, double(R - 1));
  }
}

}  // namespace
}  // namespace dflash::testing
