// One rank's training state on the GPU (TRAINING §12–§13 in CUDA precision), resident across
// steps, laid out as device_training_layout.hpp says:
//   optimizer    fp32 master weights, exp_avg, exp_avg_sq of the rank's owned range (its ZeRO-1
//                shard clipped to P, or everything under ZeRO-0): 12 B per owned element;
//   gradients    one flat fp32 gradient of the padded size: every parameter's gradient is a view
//                into it (the trunk accumulates there), the collectives run on it in place;
//   parameters   the working copy the step computes with: matrices bf16, norm weights fp32;
//   frozen       the embedding and lm_head, bf16.
// Collectives: `host` (MPI or single process) moves host scalars, `device` (NCCL, or the single
// process communicator, whose in-place collectives never touch memory) moves device vectors.
// Built only with CUDA (library dflash_cuda_training).
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/drafter/step.hpp"
#include "cuda/optimizer/adamw_program.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_training_layout.hpp"
#include "distributed/optimizer_state.hpp"
#include "distributed/training_config.hpp"

namespace dflash {

struct CudaCommunicators {
  Communicator& host;    // host buffers: W, statistics, reports, the norm's square
  Communicator& device;  // device buffers: gradients, parameters; same ranks as host
};

class CudaTrainingState {
 public:
  // From this rank's host optimizer state (fresh: make_optimizer_state; resumed:
  // restore_optimizer_state), rounded to fp32; the working copy is refreshed from it at once.
  CudaTrainingState(DeviceAllocator& allocator, CudaCommunicators comm, const DrafterConfig& config,
                    const TrainingConfig& training, const FrozenWeights<double>& frozen, const OptimizerState& state);

  DeviceAllocator& allocator() const { return allocator_; }
  CudaCommunicators communicators() const { return comm_; }
  const FlatLayout& layout() const { return layout_; }
  FlatRange owned() const { return owned_; }
  std::int64_t step() const { return step_; }

  // The per-sequence loop's weights: values in the working copy, gradients views of the flat one.
  const CudaDrafterWeights& weights() const { return weights_; }
  float* gradient() { return gradient_.data(); }  // [padded]
  const float* gradient() const { return gradient_.data(); }
  float* master() { return master_.data(); }  // [owned().size()], as exp_avg and exp_avg_sq
  float* exp_avg() { return exp_avg_.data(); }
  float* exp_avg_sq() { return exp_avg_sq_.data(); }
  const DecayTable& device_decay_table() const { return decay_table_device_; }
  void advance_step() { ++step_; }

  // The working copy from the updated master weights: ZeRO-1 all-gathers every rank's owned part
  // in place in the flat gradient buffer first (the gradient is spent by then).
  void refresh_working_copy();

  // This rank's part as the host OptimizerState (double, exact) and as full flat vectors (P
  // values, a collective over every rank; ZeRO-1 gathers through the gradient buffer):
  // what checkpoints store, whatever the backend.
  OptimizerState host_state(MemoryTracker& tracker) const;
  enum class Part { master, exp_avg, exp_avg_sq };
  std::vector<double> gather_full(Part part);
  // The working copy as double parameters (the values the next step computes with).
  DrafterParameters<double> working_parameters(MemoryTracker& tracker, const DrafterConfig& config) const;

 private:
  // Writes the working copy from flat elements [begin, begin + n) held at `values` on the device.
  void write_working_copy(const float* values, std::int64_t begin, std::int64_t n);

  DeviceAllocator& allocator_;
  CudaCommunicators comm_;
  FlatLayout layout_;
  int rank_ = 0;
  FlatRange owned_;
  std::int64_t step_ = 0;
  WorkingLayout working_;
  DeviceBuffer<float> master_, exp_avg_, exp_avg_sq_;  // optimizer
  DeviceBuffer<float> gradient_;                       // gradients
  DeviceBuffer<Bf16Bits> matrices_;                    // parameters
  DeviceBuffer<float> vectors_;                        // parameters
  DeviceBuffer<Bf16Bits> embed_tokens_, lm_head_;      // frozen
  DeviceBuffer<std::int64_t> decay_ends_;              // transient (a few bytes per tensor)
  DeviceBuffer<unsigned char> decay_flags_;
  DecayTable decay_table_device_;
  CudaDrafterWeights weights_;
};

// The squared norm of g[0, n) on the allocator's stream (cuda/optimizer/adamw_program.hpp's tree), into
// *out; partials holds kNormMaxBlocks values.
void launch_squared_norm(DeviceAllocator& allocator, const float* g, std::int64_t n, double* partials, double* out);

}  // namespace dflash
