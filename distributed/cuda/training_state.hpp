// One rank's training state in the CUDA step's precision (TRAINING §12–§13), resident across
// steps in the memory of a training backend (training_backend.hpp: the GPU; the CPU's twin in
// harness/cuda/host_training_backend.hpp), laid out as device_training_layout.hpp says:
//   optimizer    fp32 master weights, exp_avg, exp_avg_sq of the rank's owned range (its ZeRO-1
//                shard clipped to P, or everything under ZeRO-0): 12 B per owned element;
//   gradients    one flat fp32 gradient of the padded size: every parameter's gradient is a view
//                into it (the trunk accumulates there), the collectives run on it in place;
//   parameters   the working copy the step computes with: matrices bf16, norm weights fp32;
//   frozen       the embedding and lm_head, bf16.
// Collectives: `host` (MPI or single process) moves host scalars, `device` (NCCL, or the single
// process communicator, whose in-place collectives never touch memory; MPI on the CPU's twin)
// moves the backend's vectors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/bf16.hpp"
#include "cuda/drafter/step_loop.hpp"
#include "cuda/optimizer/adamw_program.hpp"
#include "cuda/runtime/bf16_bits.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_training_layout.hpp"
#include "distributed/optimizer_part.hpp"
#include "distributed/optimizer_state.hpp"
#include "distributed/training_config.hpp"
#include "io/errors.hpp"
#include "reference/frozen_weight_source.hpp"

namespace dflash {

struct CudaCommunicators {
  Communicator& host;    // host buffers: W, statistics, reports, the norm's square
  Communicator& device;  // the backend's buffers: gradients, parameters; same ranks as host
};

// E or W_lm ([V, H], n = V H elements) from `source` into a new bf16 buffer of category frozen,
// kFrozenPieceElements at a time: the bits upload_bf16_to gives for the whole tensor, with one
// piece's doubles and bits on the host at once instead of 10 GB of doubles and 2.5 GB of bits at
// full scale.
template <class Backend>
typename Backend::template Buffer<Bf16Bits> upload_frozen_bf16(const Backend& be, const FrozenWeightSource& source,
                                                               FrozenTensor which, std::int64_t n) {
  auto buffer = be.template buffer<Bf16Bits>(MemoryCategory::frozen, std::size_t(n));
  std::vector<double> piece;
  std::vector<Bf16Bits> bits;
  for (std::int64_t first = 0; first < n; first += kFrozenPieceElements) {
    const std::int64_t count = std::min(kFrozenPieceElements, n - first);
    piece.resize(std::size_t(count));
    source.read(which, first, piece);
    bf16_bits_into(piece.data(), count, bits);
    be.write(buffer.data() + first, bits.data(), std::size_t(count) * sizeof(Bf16Bits));
  }
  return buffer;
}

template <class Backend>
class DeviceTrainingState {
 public:
  template <class T>
  using Buffer = typename Backend::template Buffer<T>;
  using Part = OptimizerPart;

  // From this rank's host optimizer state (fresh: make_optimizer_state; resumed:
  // restore_optimizer_state), rounded to fp32; the working copy is refreshed from it at once. The
  // frozen weights are read from `frozen` a piece at a time (upload_frozen_bf16).
  DeviceTrainingState(Backend backend, CudaCommunicators comm, const DrafterConfig& config,
                      const TrainingConfig& training, const FrozenWeights<double>& frozen, const OptimizerState& state)
      : DeviceTrainingState(backend, comm, config, training, FrozenWeightsInMemory(frozen), state) {}
  DeviceTrainingState(Backend backend, CudaCommunicators comm, const DrafterConfig& config,
                      const TrainingConfig& training, const FrozenWeightSource& frozen, const OptimizerState& state)
      : be_(backend),
        comm_(comm),
        layout_(config, comm.device.size(), training.zero_stage),
        rank_(comm.device.rank()),
        owned_(owned_range(layout_, rank_)),
        working_(working_layout(layout_)) {
    if (comm.host.size() != comm.device.size() || comm.host.rank() != comm.device.rank()) {
      throw_input_error("communicators", str("host rank ", comm.host.rank(), " of ", comm.host.size(),
                                             " but device rank ", comm.device.rank(), " of ", comm.device.size()));
    }
    validate_training_config(training);
    const DeviceOptimizerPart part = device_optimizer_part(layout_, rank_, state);
    step_ = part.step;
    master_ = be_.from_host(MemoryCategory::optimizer, part.master);
    exp_avg_ = be_.from_host(MemoryCategory::optimizer, part.exp_avg);
    exp_avg_sq_ = be_.from_host(MemoryCategory::optimizer, part.exp_avg_sq);
    gradient_ = be_.template buffer<float>(MemoryCategory::gradients, std::size_t(layout_.padded()));
    gradient_.zero();
    matrices_ = be_.template buffer<Bf16Bits>(MemoryCategory::parameters, std::size_t(working_.matrix_elements));
    vectors_ = be_.template buffer<float>(MemoryCategory::parameters, std::size_t(working_.vector_elements));
    embed_tokens_ = upload_frozen_bf16(be_, frozen, FrozenTensor::embed_tokens, config.vocab_size * config.hidden_size);
    lm_head_ = upload_frozen_bf16(be_, frozen, FrozenTensor::lm_head, config.vocab_size * config.hidden_size);
    const HostDecayTable table = decay_table(layout_);
    decay_ends_ = be_.from_host(MemoryCategory::transient, table.ends);
    decay_flags_ = be_.from_host(MemoryCategory::transient, table.decay);
    decay_table_device_ = {decay_ends_.data(), decay_flags_.data(), int(table.ends.size())};

    std::vector<const void*> values;  // per parameter, canonical order: its slot in the working copy
    std::vector<float*> grads;        // and its view of the flat gradient
    for (std::size_t t = 0; t < layout_.tensors().size(); ++t) {
      const WorkingSlot& slot = working_.slots[t];
      values.push_back(slot.matrix ? static_cast<const void*>(matrices_.data() + slot.offset)
                                   : static_cast<const void*>(vectors_.data() + slot.offset));
      grads.push_back(gradient_.data() + layout_.tensors()[t].offset);
    }
    weights_.lm_head = lm_head_.data();
    bind_trunk_parameters(config, values, grads, embed_tokens_.data(), weights_.trunk, weights_.grads);
    refresh_working_copy();
  }
  DeviceTrainingState(const DeviceTrainingState&) = delete;
  DeviceTrainingState& operator=(const DeviceTrainingState&) = delete;

  const Backend& backend() const { return be_; }
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
  void refresh_working_copy() {
    if (layout_.zero_stage() == 0) {
      write_working_copy(master_.data(), owned_.begin, owned_.size());
      return;
    }
    write_working_copy(gathered(master_), 0, layout_.count());
  }

  // This rank's part as the host OptimizerState (double, exact) and as full flat vectors (P
  // values, a collective over every rank; ZeRO-1 gathers through the gradient buffer):
  // what checkpoints store, whatever the backend.
  OptimizerState host_state(MemoryTracker& tracker) const {
    return host_optimizer_state(tracker, layout_, rank_,
                                {step_, be_.to_host(master_), be_.to_host(exp_avg_), be_.to_host(exp_avg_sq_)});
  }
  // to_host false: the rank takes part in the collective but reads nothing back (an empty vector):
  // the ranks that do not write the checkpoint (P floats a part, 6.9 GB at full scale).
  std::vector<float> gather_full_fp32(Part which, bool to_host = true) {
    const Buffer<float>& part = which == Part::master ? master_ : which == Part::exp_avg ? exp_avg_ : exp_avg_sq_;
    if (layout_.zero_stage() == 0) return to_host ? be_.to_host(part) : std::vector<float>{};
    const float* full = gathered(part);
    if (!to_host) return {};
    std::vector<float> all(std::size_t(layout_.count()));
    be_.read(all.data(), full, all.size() * sizeof(float));
    return all;
  }
  // The same as doubles (exact): for tests and the golden check, which compare in double.
  std::vector<double> gather_full(Part which, bool to_host = true) {
    const std::vector<float> all = gather_full_fp32(which, to_host);
    return std::vector<double>(all.begin(), all.end());
  }
  // The working copy as double parameters (the values the next step computes with).
  DrafterParameters<double> working_parameters(MemoryTracker& tracker, const DrafterConfig& config) const {
    const std::vector<Bf16Bits> matrices = be_.to_host(matrices_);
    const std::vector<float> vectors = be_.to_host(vectors_);
    DrafterParameters<double> p = make_drafter_parameters<double>(tracker, config, MemoryCategory::parameters);
    std::size_t t = 0;
    p.for_each([&](const std::string&, Tensor<double>& x) {
      const WorkingSlot& slot = working_.slots.at(t++);
      for (std::int64_t e = 0; e < x.numel(); ++e) {
        const std::size_t at = std::size_t(slot.offset + e);
        x[e] = slot.matrix ? double(float_from_bf16_bits(matrices[at])) : double(vectors[at]);
      }
    });
    return p;
  }

 private:
  // ZeRO-1: every rank's owned part of `part` gathered in place (NCCL's convention: rank r sends
  // [r s, (r + 1) s) of the buffer it receives into) in the flat gradient buffer; returns it.
  const float* gathered(const Buffer<float>& part) {
    const std::int64_t s = layout_.shard_size();
    float* mine = gradient_.data() + std::int64_t(rank_) * s;
    if (owned_.size() > 0) be_.copy(mine, part.data(), std::size_t(owned_.size()) * sizeof(float));
    be_.synchronize();  // the device communicator runs on its own stream
    comm_.device.all_gather(mine, gradient_.data(), std::size_t(s), CommType::f32);
    return gradient_.data();
  }

  // Writes the working copy from flat elements [begin, begin + n) held at `values`.
  void write_working_copy(const float* values, std::int64_t begin, std::int64_t n) {
    for (const WorkingCopyRun& r : working_copy_runs(layout_, working_, begin, n)) {
      if (r.matrix) {
        be_.bf16_copy(values + r.source, r.length, matrices_.data() + r.target);
      } else {
        be_.copy(vectors_.data() + r.target, values + r.source, std::size_t(r.length) * sizeof(float));
      }
    }
  }

  Backend be_;
  CudaCommunicators comm_;
  FlatLayout layout_;
  int rank_ = 0;
  FlatRange owned_;
  std::int64_t step_ = 0;
  WorkingLayout working_;
  Buffer<float> master_, exp_avg_, exp_avg_sq_;  // optimizer
  Buffer<float> gradient_;                       // gradients
  Buffer<Bf16Bits> matrices_;                    // parameters
  Buffer<float> vectors_;                        // parameters
  Buffer<Bf16Bits> embed_tokens_, lm_head_;      // frozen
  Buffer<std::int64_t> decay_ends_;              // transient (a few bytes per tensor)
  Buffer<unsigned char> decay_flags_;
  DecayTable decay_table_device_;
  CudaDrafterWeights weights_;
};

}  // namespace dflash
