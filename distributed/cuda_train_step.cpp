#include "distributed/cuda_train_step.hpp"

#include <cmath>
#include <vector>

#include "common/adamw.hpp"
#include "cuda/optimizer_kernels.hpp"
#include "distributed/step_checks.hpp"
#include "reference/errors.hpp"

namespace dflash {
namespace {

// The squared norm of g[0, n) on the device (cuda/optimizer_program.hpp's tree), into *out.
void squared_norm(DeviceAllocator& a, const float* g, std::int64_t n, double* partials, double* out) {
  launch_squared_norm_partials(g, n, partials, a.stream());
  launch_squared_norm_finish(partials, norm_blocks(n), out, a.stream());
}

// §12 on this rank's own gradient: the first tensor (canonical order) whose squared norm is not
// finite holds a non-finite element (fp32 squares summed in double cannot overflow), found by
// downloading that tensor; then the loss.
NonFiniteReport find_non_finite(CudaTrainingState& state, double local_loss) {
  DeviceAllocator& a = state.allocator();
  const std::vector<FlatTensor>& tensors = state.layout().tensors();
  DeviceBuffer<double> partials(a, MemoryCategory::transient, std::size_t(kNormMaxBlocks));
  DeviceBuffer<double> norms(a, MemoryCategory::transient, tensors.size());
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    squared_norm(a, state.gradient() + tensors[t].offset, tensors[t].numel, partials.data(), norms.data() + t);
  }
  const std::vector<double> squares = norms.download();
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (std::isfinite(squares[t])) continue;
    std::vector<float> g(std::size_t(tensors[t].numel));
    copy_to_host(a, g.data(), state.gradient() + tensors[t].offset, g.size() * sizeof(float));
    for (std::size_t e = 0; e < g.size(); ++e) {
      if (!std::isfinite(g[e])) return {2, std::int64_t(t), std::int64_t(e)};
    }
  }
  if (!std::isfinite(local_loss)) return {1, 0, 0};
  return {};
}

// Sums the flat gradient over ranks in place: ZeRO-0 every rank gets the whole sum (chunks of the
// plan's bucket), ZeRO-1 rank r gets shard r's sums at [r s, (r + 1) s). Called on one rank too:
// the single-process communicator's in-place collectives do nothing, NCCL's copy in place, and
// the one-rank NCCL run takes the same path as R ranks.
void reduce_gradients(CudaTrainingState& state, std::int64_t bucket_bytes) {
  const FlatLayout& layout = state.layout();
  Communicator& device = state.communicators().device;
  state.allocator().synchronize();  // the gradient is finished on the allocator's stream
  if (layout.zero_stage() == 0) {
    const ParallelLayout plan = layout.parallel_layout(bucket_bytes, 1);
    for (const FlatRange& c : all_reduce_chunks(layout, bucket_elements(layout.count(), plan, sizeof(float)))) {
      float* chunk = state.gradient() + c.begin;
      device.all_reduce(chunk, chunk, std::size_t(c.size()), CommType::f32, CommOp::sum);
    }
    return;
  }
  const std::int64_t s = layout.shard_size();
  device.reduce_scatter(state.gradient(), state.gradient() + std::int64_t(device.rank()) * s, std::size_t(s),
                        CommType::f32, CommOp::sum);
}

struct AppliedStep {
  double lr = 0, grad_norm = 0;
  bool clipped = false;
};

// n over the whole flat gradient, clipping, lr_t and AdamW on the owned range; step + 1.
AppliedStep apply_cuda_optimizer_step(CudaTrainingState& state, const TrainingConfig& training,
                                      const std::string& last_good_checkpoint) {
  DeviceAllocator& a = state.allocator();
  const FlatLayout& layout = state.layout();
  const FlatRange owned = state.owned();
  const std::int64_t t = state.step();
  DeviceBuffer<double> partials(a, MemoryCategory::transient, std::size_t(kNormMaxBlocks));
  DeviceBuffer<double> square(a, MemoryCategory::transient, 1);
  squared_norm(a, state.gradient() + owned.begin, owned.size(), partials.data(), square.data());
  double norm_squared = square.download()[0];
  if (layout.zero_stage() == 1) all_reduce_sum(state.communicators().host, std::span<double>(&norm_squared, 1));
  const double norm = std::sqrt(norm_squared);
  if (!std::isfinite(norm)) throw_non_finite(t, -1, "gradient norm", "gradient norm", last_good_checkpoint);

  const double coefficient = clip_coefficient(norm, training.max_grad_norm);
  const double lr = learning_rate_at(t, training.learning_rate, training.min_learning_rate, training.warmup_steps,
                                     training.total_steps);
  if (owned.size() > 0) {
    const AdamWRange range{state.master(),
                           state.exp_avg(),
                           state.exp_avg_sq(),
                           state.gradient() + owned.begin,
                           owned.begin,
                           owned.end,
                           coefficient,
                           adamw_scalars(lr, training.weight_decay, true, training.adam_beta1, training.adam_beta2,
                                         training.adam_epsilon, t),
                           adamw_scalars(lr, training.weight_decay, false, training.adam_beta1, training.adam_beta2,
                                         training.adam_epsilon, t),
                           state.device_decay_table()};
    launch_adamw_step(range, a.stream());
  }
  state.advance_step();
  return {lr, norm, coefficient < 1.0};
}

}  // namespace

StepMetrics cuda_train_step(MemoryTracker& host, CudaTrainingState& state, const DrafterConfig& config,
                            const TrainingConfig& training, std::span<const RankSequences> sequences,
                            const TrainStepOptions& options) {
  validate_training_config(training);
  Communicator& comm = state.communicators().host;
  const GlobalBatchLayout batch_layout = GlobalBatchLayout::of(training, comm.size());
  const FlatLayout& layout = state.layout();
  if (layout.count() != FlatLayout(config, comm.size(), training.zero_stage).count() ||
      layout.zero_stage() != training.zero_stage) {
    throw_input_error("CUDA training state", str("was made for ", layout.count(), " parameters under ZeRO-",
                                                 layout.zero_stage(), "; this step's config has ",
                                                 FlatLayout(config, comm.size(), training.zero_stage).count(),
                                                 " under ZeRO-", training.zero_stage));
  }
  check_rank_sequences(batch_layout, comm.rank(), training, sequences);
  if (options.bucket_bytes < 1) throw_input_error("bucket_bytes", str(options.bucket_bytes, " must be at least 1"));
  if (options.dropout_observer != nullptr) {
    throw_input_error("dropout_observer", "the CUDA step draws its dropout masks on the device; observe the reference step");
  }
  const std::int64_t t = state.step();
  if (t >= (std::int64_t(1) << 32)) throw_input_error("optimizer step", str(t, " exceeds the 32-bit RNG counter word"));
  auto step_options = [&](const RankSequences& s) {
    return drafter_step_options(config, static_cast<std::uint32_t>(t), static_cast<std::uint32_t>(s.first_global_index));
  };

  // W over the whole global batch, before any backward (§11).
  double W = 0;
  for (const RankSequences& s : sequences) W += drafter_weight_sum(config, *s.batch, step_options(s));
  all_reduce_sum(comm, std::span<double>(&W, 1));

  // Forward and backward of every sequence, gradients summed into the flat fp32 gradient.
  zero_on_device(state.allocator(), state.gradient(), std::size_t(layout.padded()) * sizeof(float));
  double sums[3] = {0, 0, 0};       // loss, ce, kl
  std::int64_t counts[2] = {0, 0};  // correct, labelled rows
  std::vector<SequenceHits> hits;   // this rank's sequences' rows, for the block statistics
  for (const RankSequences& s : sequences) {
    const DrafterStepOptions o = step_options(s);
    const LossHeadOptions loss_options = validate_drafter_step_options(config, o);  // the batch: drafter_weight_sum
    const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, *s.batch, o);
    drafter_detail::validate_teacher_rows(*s.batch, seqs);
    std::vector<std::vector<std::uint8_t>> seq_hits;
    const LossHeadStats<double> stats = cuda_drafter_sequences(state.allocator(), host, config, state.weights(), *s.batch,
                                                               o, loss_options, seqs, W, nullptr, &seq_hits);
    for (std::size_t b = 0; b < seqs.size(); ++b) {
      hits.push_back({seqs[b].slots.keep, seqs[b].blocks.valid, std::move(seq_hits[b])});
    }
    sums[0] += stats.loss;
    sums[1] += stats.ce;
    sums[2] += stats.kl;
    counts[0] += stats.correct;
    counts[1] += stats.valid_rows;
  }

  // §12: nothing is applied anywhere if any rank saw a non-finite loss or gradient.
  require_finite_everywhere(comm, layout, t, find_non_finite(state, sums[0]), options.last_good_checkpoint);
  all_reduce_sum(comm, std::span<double>(sums, 3));
  all_reduce_sum(comm, std::span<std::int64_t>(counts, 2));
  reduce_gradients(state, options.bucket_bytes);
  if (!std::isfinite(sums[0])) throw_non_finite(t, -1, "loss", "loss", options.last_good_checkpoint);
  const AppliedStep applied = apply_cuda_optimizer_step(state, training, options.last_good_checkpoint);
  state.refresh_working_copy();
  state.allocator().synchronize();

  StepMetrics m = step_metrics(t, sums, counts, W, applied.lr, applied.grad_norm, applied.clipped);
  m.sequence_hits = std::move(hits);
  return m;
}

}  // namespace dflash
