// A build without CUDA: `--backend cuda` is refused, naming why.
#include "distributed/run/cuda_step_backend.hpp"

#include "io/errors.hpp"

namespace dflash {
namespace {

[[noreturn]] void refuse() {
  throw_input_error("--backend",
                    "cuda: this dflash was built without CUDA (no nvcc found at configure time); "
                    "use --backend cpu or build with the CUDA toolkit");
}

}  // namespace

std::optional<std::int64_t> cuda_device_bytes(Communicator&) { return std::nullopt; }

void require_cuda_training_available(Communicator&) { refuse(); }

std::unique_ptr<StepBackend> make_cuda_step_backend(Communicator&, const DrafterConfig&, const TrainingConfig&,
                                                    const FrozenWeightSource&, TrainingState) {
  refuse();
}

}  // namespace dflash
