#include "distributed/cuda/training_state.hpp"

#include "common/bf16.hpp"
#include "cuda/optimizer/adamw_kernels.hpp"
#include "io/errors.hpp"

namespace dflash {
namespace {

template <class T>
DeviceBuffer<T> upload(DeviceAllocator& a, MemoryCategory c, const std::vector<T>& host) {
  DeviceBuffer<T> b(a, c, host.size());
  if (!host.empty()) b.upload(host);
  return b;
}

}  // namespace

CudaTrainingState::CudaTrainingState(DeviceAllocator& allocator, CudaCommunicators comm, const DrafterConfig& config,
                                     const TrainingConfig& training, const FrozenWeights<double>& frozen,
                                     const OptimizerState& state)
    : allocator_(allocator),
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
  master_ = upload(allocator, MemoryCategory::optimizer, part.master);
  exp_avg_ = upload(allocator, MemoryCategory::optimizer, part.exp_avg);
  exp_avg_sq_ = upload(allocator, MemoryCategory::optimizer, part.exp_avg_sq);
  gradient_ = DeviceBuffer<float>(allocator, MemoryCategory::gradients, std::size_t(layout_.padded()));
  gradient_.zero();
  matrices_ = DeviceBuffer<Bf16Bits>(allocator, MemoryCategory::parameters, std::size_t(working_.matrix_elements));
  vectors_ = DeviceBuffer<float>(allocator, MemoryCategory::parameters, std::size_t(working_.vector_elements));
  embed_tokens_ =
      upload_bf16(allocator, MemoryCategory::frozen, frozen.embed_tokens.data(), frozen.embed_tokens.numel());
  lm_head_ = upload_bf16(allocator, MemoryCategory::frozen, frozen.lm_head.data(), frozen.lm_head.numel());
  const HostDecayTable table = decay_table(layout_);
  decay_ends_ = upload(allocator, MemoryCategory::transient, table.ends);
  decay_flags_ = upload(allocator, MemoryCategory::transient, table.decay);
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

void CudaTrainingState::write_working_copy(const float* values, std::int64_t begin, std::int64_t n) {
  for (const WorkingCopyRun& r : working_copy_runs(layout_, working_, begin, n)) {
    if (r.matrix) {
      launch_bf16_copy(values + r.source, r.length, matrices_.data() + r.target, allocator_.stream());
    } else {
      copy_on_device(allocator_, vectors_.data() + r.target, values + r.source, std::size_t(r.length) * sizeof(float));
    }
  }
}

void CudaTrainingState::refresh_working_copy() {
  if (layout_.zero_stage() == 0) {
    write_working_copy(master_.data(), owned_.begin, owned_.size());
    return;
  }
  // In place (NCCL's convention): rank r sends [r s, (r + 1) s) of the buffer it receives into.
  const std::int64_t s = layout_.shard_size();
  float* mine = gradient_.data() + std::int64_t(rank_) * s;
  if (owned_.size() > 0) copy_on_device(allocator_, mine, master_.data(), std::size_t(owned_.size()) * sizeof(float));
  allocator_.synchronize();  // the device communicator runs on its own stream
  comm_.device.all_gather(mine, gradient_.data(), std::size_t(s), CommType::f32);
  write_working_copy(gradient_.data(), 0, layout_.count());
}

OptimizerState CudaTrainingState::host_state(MemoryTracker& tracker) const {
  return host_optimizer_state(tracker, layout_, rank_,
                              {step_, master_.download(), exp_avg_.download(), exp_avg_sq_.download()});
}

std::vector<double> CudaTrainingState::gather_full(Part which) {
  const DeviceBuffer<float>& part = which == Part::master ? master_ : which == Part::exp_avg ? exp_avg_ : exp_avg_sq_;
  if (layout_.zero_stage() == 0) {
    const std::vector<float> all = part.download();
    return std::vector<double>(all.begin(), all.end());
  }
  const std::int64_t s = layout_.shard_size();
  float* mine = gradient_.data() + std::int64_t(rank_) * s;
  if (owned_.size() > 0) copy_on_device(allocator_, mine, part.data(), std::size_t(owned_.size()) * sizeof(float));
  allocator_.synchronize();
  comm_.device.all_gather(mine, gradient_.data(), std::size_t(s), CommType::f32);
  std::vector<float> all(std::size_t(layout_.count()));
  copy_to_host(allocator_, all.data(), gradient_.data(), all.size() * sizeof(float));
  return std::vector<double>(all.begin(), all.end());
}

DrafterParameters<double> CudaTrainingState::working_parameters(MemoryTracker& tracker,
                                                                const DrafterConfig& config) const {
  const std::vector<Bf16Bits> matrices = matrices_.download();
  const std::vector<float> vectors = vectors_.download();
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

void launch_squared_norm(DeviceAllocator& a, const float* g, std::int64_t n, double* partials, double* out) {
  launch_squared_norm_partials(g, n, partials, a.stream());
  launch_squared_norm_finish(partials, norm_blocks(n), out, a.stream());
}

}  // namespace dflash
