#include "distributed/run/cuda_step_backend.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>

#include "cuda/runtime/device_probe.hpp"
#include "distributed/cuda/select_rank_device.hpp"
#include "distributed/cuda/train_step.hpp"
#include "distributed/mpi_communicator.hpp"
#include "distributed/run/device_step_backend.hpp"
#include "distributed/single_process_communicator.hpp"
#include "io/errors.hpp"
#if DFLASH_WITH_NCCL
#include "distributed/cuda/nccl_communicator.hpp"
#endif

namespace dflash {

namespace {

// This rank's GPU (rank_device.hpp), made current; nullopt when it has none it can use.
std::optional<int> select_device_of(Communicator& comm) {
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&comm);
  return select_rank_device(mpi != nullptr ? mpi->node_local_rank() : 0);
}

}  // namespace

std::optional<std::int64_t> cuda_device_bytes(Communicator& comm) {
  // A rank without a usable GPU gives 0, so the minimum over ranks is 0 when any has none.
  std::int64_t bytes = 0;
  cudaDeviceProp prop{};
  if (const std::optional<int> device = select_device_of(comm);
      device && cudaGetDeviceProperties(&prop, *device) == cudaSuccess) {
    bytes = std::int64_t(std::min<std::size_t>(prop.totalGlobalMem, std::numeric_limits<std::int64_t>::max()));
  }
  comm.all_reduce(&bytes, &bytes, 1, CommType::i64, CommOp::min);
  if (bytes == 0) return std::nullopt;
  return bytes;
}

void require_cuda_training_available(Communicator& comm) {
  select_device_of(comm);  // else the probe says why
  const CudaDeviceStatus& gpu = cuda_device_status();
  if (!gpu.available) {
    throw_input_error("--backend", str("cuda: no GPU is available to this process (", gpu.reason,
                                       "); use --backend cpu, or run where a GPU is"));
  }
}

namespace {

// The device communicator of the host one: R = 1 of a plain start stays in process; MPI ranks
// (mpirun, even with one rank) talk over NCCL, which also picks this rank's GPU.
std::unique_ptr<Communicator> device_communicator(Communicator& host) {
  if (host.backend() == "single") return std::make_unique<SingleProcessCommunicator>();
#if DFLASH_WITH_NCCL
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(&host)) return std::make_unique<NcclCommunicator>(*mpi);
#endif
  throw_input_error("--backend", str("cuda on ", host.size(), " rank(s) over ", host.backend(),
                                     ": GPU ranks need NCCL, which this dflash was built without"));
}

// What the CUDA backend owns before its state: the device communicator (made first: NCCL selects
// the GPU) and the allocator on that GPU.
struct CudaStepResources {
  std::unique_ptr<Communicator> device_comm;
  DeviceAllocator allocator;
  explicit CudaStepResources(Communicator& host) : device_comm(device_communicator(host)) {}
};

class CudaStepBackend final : private CudaStepResources, public DeviceStepBackend<CudaTrainingBackend> {
 public:
  CudaStepBackend(Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                  const FrozenWeightSource& frozen, const TrainingState& state)
      : CudaStepResources(comm),
        DeviceStepBackend(CudaTrainingBackend{{allocator}}, {comm, *device_comm}, config, training, frozen,
                          state.optimizer) {}
};

}  // namespace

std::unique_ptr<StepBackend> make_cuda_step_backend(Communicator& comm, const DrafterConfig& config,
                                                    const TrainingConfig& training, const FrozenWeightSource& frozen,
                                                    TrainingState state) {
  require_cuda_training_available(comm);
  return std::make_unique<CudaStepBackend>(comm, config, training, frozen, state);
}

}  // namespace dflash
