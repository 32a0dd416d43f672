#include "distributed/run/cuda_step_backend.hpp"

#include <cuda_runtime_api.h>

#include "cuda/drafter/step.hpp"
#include "cuda/runtime/device_probe.hpp"
#include "distributed/cuda/train_step.hpp"
#include "distributed/mpi_communicator.hpp"
#include "distributed/single_process_communicator.hpp"
#include "io/errors.hpp"
#if DFLASH_WITH_NCCL
#include "distributed/cuda/nccl_communicator.hpp"
#endif

namespace dflash {

void require_cuda_training_available(Communicator& comm) {
  if (const auto* mpi = dynamic_cast<const MpiCommunicator*>(&comm)) {
    const int local = mpi->node_local_rank();
    int devices = 0;
    if (cudaGetDeviceCount(&devices) == cudaSuccess && local < devices)
      cudaSetDevice(local);  // else the probe says why
  }
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

class CudaStepBackend final : public StepBackend {
 public:
  CudaStepBackend(Communicator& comm, const DrafterConfig& config, const TrainingConfig& training,
                  const FrozenWeights<double>& frozen, TrainingState state)
      : config_(config),
        training_(training),
        device_comm_(device_communicator(comm)),  // before the allocator: NCCL selects the GPU
        state_(allocator_, {comm, *device_comm_}, config, training, frozen, state.optimizer) {}

  std::int64_t completed_steps() const override { return state_.step(); }
  // The forward alone on the resident working copy, with the host checks the step runs first.
  SequenceEvaluation forward_statistics(const DrafterConfig& config, const DrafterBatch<double>& batch,
                                        const DrafterStepOptions& options) override {
    validate_drafter_batch(config, batch, options.sequence_offset);
    const LossHeadOptions loss_options = validate_drafter_step_options(config, options);
    const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, batch, options);
    drafter_detail::validate_teacher_rows(batch, seqs);
    std::vector<std::vector<std::uint8_t>> hits;
    SequenceEvaluation e{cuda_drafter_forward_sequences(state_.allocator(), host_tracker_, config, state_.weights(),
                                                        batch, options, loss_options, seqs, 1.0, &hits),
                         0.0, BlockStatistics(config.block_size)};
    for (std::size_t b = 0; b < seqs.size(); ++b) {
      for (const double w : seqs[b].blocks.weights) e.weight_sum += w;
      add_block_hits(e.blocks, config.block_size, seqs[b].slots.keep, seqs[b].blocks.valid, hits[b]);
    }
    return e;
  }
  StepMetrics step(std::span<const RankSequences> sequences, const TrainStepOptions& options) override {
    return cuda_train_step(host_tracker_, state_, config_, training_, sequences, options);
  }
  std::array<std::vector<double>, 3> gather_optimizer() override {
    return {state_.gather_full(CudaTrainingState::Part::master), state_.gather_full(CudaTrainingState::Part::exp_avg),
            state_.gather_full(CudaTrainingState::Part::exp_avg_sq)};
  }
  safetensors::Dtype master_dtype() const override { return safetensors::Dtype::F32; }
  std::map<std::string, std::int64_t> peak_bytes() const override { return peak_bytes_of(allocator_.tracker()); }
  void reset_peaks() override { allocator_.reset_peaks(); }

 private:
  const DrafterConfig& config_;
  const TrainingConfig& training_;
  std::unique_ptr<Communicator> device_comm_;
  DeviceAllocator allocator_;
  MemoryTracker host_tracker_;
  CudaTrainingState state_;
};

}  // namespace

std::unique_ptr<StepBackend> make_cuda_step_backend(Communicator& comm, const DrafterConfig& config,
                                                    const TrainingConfig& training, const FrozenWeights<double>& frozen,
                                                    TrainingState state) {
  require_cuda_training_available(comm);
  return std::make_unique<CudaStepBackend>(comm, config, training, frozen, std::move(state));
}

}  // namespace dflash
