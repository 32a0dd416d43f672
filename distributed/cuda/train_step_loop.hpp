// The CUDA training step's orchestration over a training backend (training_backend.hpp), in the
// order train_step.hpp lists: the GPU runs it on CudaTrainingBackend (cuda_train_step), the CPU
// tests on HostTrainingBackend (harness/cuda/host_training_backend.hpp) over the single-process and
// MPI communicators, so that every offset, range and collective of the step runs in CI on 1 ... 4
// ranks.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/adamw.hpp"
#include "distributed/cuda/bucket_reduction.hpp"
#include "distributed/cuda/training_state.hpp"
#include "distributed/step_checks.hpp"
#include "distributed/train_step.hpp"
#include "io/errors.hpp"

namespace dflash {
namespace train_step_detail {

// §12 on this rank's own gradient, from its per-tensor squared norms on the device (taken before
// any sum over ranks): the first tensor (canonical order) whose squared norm is not finite holds a
// non-finite element (fp32 squares summed in double cannot overflow), found by downloading that
// tensor (ZeRO-0: already summed, bucket_reduction.hpp says what that changes); then the loss.
template <class Backend>
NonFiniteReport find_non_finite(DeviceTrainingState<Backend>& state, const double* device_norms, double local_loss) {
  const Backend& be = state.backend();
  const std::vector<FlatTensor>& tensors = state.layout().tensors();
  std::vector<double> squares(tensors.size());
  be.read(squares.data(), device_norms, squares.size() * sizeof(double));
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (std::isfinite(squares[t])) continue;
    std::vector<float> g(std::size_t(tensors[t].numel));
    be.read(g.data(), state.gradient() + tensors[t].offset, g.size() * sizeof(float));
    for (std::size_t e = 0; e < g.size(); ++e) {
      if (!std::isfinite(g[e])) return {2, std::int64_t(t), std::int64_t(e)};
    }
  }
  if (!std::isfinite(local_loss)) return {1, 0, 0};
  return {};
}

// ZeRO-1, after the backward: rank r gets shard r's sums at [r s, (r + 1) s), in place. Called on
// one rank too: the single-process communicator's in-place collectives do nothing, NCCL's copy in
// place, and the one-rank NCCL run takes the same path as R ranks. (ZeRO-0 sums its buckets during
// the backward: BucketReduction.)
template <class Backend>
void reduce_scatter_gradients(DeviceTrainingState<Backend>& state) {
  const FlatLayout& layout = state.layout();
  Communicator& device = state.communicators().device;
  state.backend().synchronize();  // the gradient is finished on the compute stream
  const std::int64_t s = layout.shard_size();
  device.reduce_scatter(state.gradient(), state.gradient() + std::int64_t(device.rank()) * s, std::size_t(s),
                        CommType::f32, CommOp::sum);
}

struct AppliedStep {
  double lr = 0, grad_norm = 0;
  bool clipped = false;
};

// n over the whole flat gradient, clipping, lr_t and AdamW on the owned range; step + 1.
template <class Backend>
AppliedStep apply_optimizer_step(DeviceTrainingState<Backend>& state, const TrainingConfig& training,
                                 const std::string& last_good_checkpoint) {
  const Backend& be = state.backend();
  const FlatLayout& layout = state.layout();
  const FlatRange owned = state.owned();
  const std::int64_t t = state.step();
  auto partials = be.template buffer<double>(MemoryCategory::transient, std::size_t(kNormMaxBlocks));
  auto square = be.template buffer<double>(MemoryCategory::transient, 1);
  be.squared_norm(state.gradient() + owned.begin, owned.size(), partials.data(), square.data());
  double norm_squared = be.to_host(square)[0];
  if (layout.zero_stage() == 1) all_reduce_sum(state.communicators().host, std::span<double>(&norm_squared, 1));
  const double norm = std::sqrt(norm_squared);
  if (!std::isfinite(norm)) throw_non_finite(t, -1, "gradient norm", "gradient norm", last_good_checkpoint);

  const double coefficient = clip_coefficient(norm, training.max_grad_norm);
  const double lr = learning_rate_at(t, training.learning_rate, training.min_learning_rate, training.warmup_steps,
                                     training.total_steps);
  if (owned.size() > 0) {
    // The owned elements sit at [0, owned.size()) of the optimizer's vectors and at owned.begin
    // of the flat gradient; begin is also where the decay table is looked up.
    const AdamWRange range{.theta = state.master(),
                           .m = state.exp_avg(),
                           .v = state.exp_avg_sq(),
                           .g = state.gradient() + owned.begin,
                           .begin = owned.begin,
                           .end = owned.end,
                           .clip = coefficient,
                           .decayed = adamw_scalars(lr, training.weight_decay, true, training.adam_beta1,
                                                    training.adam_beta2, training.adam_epsilon, t),
                           .plain = adamw_scalars(lr, training.weight_decay, false, training.adam_beta1,
                                                  training.adam_beta2, training.adam_epsilon, t),
                           .table = state.device_decay_table()};
    be.adamw_step(range);
  }
  state.advance_step();
  return {lr, norm, coefficient < 1.0};
}

}  // namespace train_step_detail

// cuda_train_step (train_step.hpp) on any training backend.
template <class Backend>
StepMetrics train_step_on(MemoryTracker& host, DeviceTrainingState<Backend>& state, const DrafterConfig& config,
                          const TrainingConfig& training, std::span<const RankSequences> sequences,
                          const TrainStepOptions& options = {}) {
  validate_training_config(training);
  Communicator& comm = state.communicators().host;
  const GlobalBatchLayout batch_layout = GlobalBatchLayout::of(training, comm.size());
  const FlatLayout& layout = state.layout();
  if (layout.count() != FlatLayout(config, comm.size(), training.zero_stage).count() ||
      layout.zero_stage() != training.zero_stage) {
    throw_input_error("CUDA training state",
                      str("was made for ", layout.count(), " parameters under ZeRO-", layout.zero_stage(),
                          "; this step's config has ", FlatLayout(config, comm.size(), training.zero_stage).count(),
                          " under ZeRO-", training.zero_stage));
  }
  check_rank_sequences(batch_layout, comm.rank(), training, sequences);
  if (options.bucket_bytes < 1) throw_input_error("bucket_bytes", str(options.bucket_bytes, " must be at least 1"));
  if (options.dropout_observer != nullptr) {
    throw_input_error("dropout_observer",
                      "the CUDA step draws its dropout masks on the device; observe the reference step");
  }
  const std::int64_t t = state.step();
  if (t >= (std::int64_t(1) << 32)) throw_input_error("optimizer step", str(t, " exceeds the 32-bit RNG counter word"));
  auto step_options = [&](const RankSequences& s) {
    return drafter_step_options(config, static_cast<std::uint32_t>(t),
                                static_cast<std::uint32_t>(s.first_global_index));
  };

  // W over the whole global batch, before any backward (§11).
  double W = 0;
  for (const RankSequences& s : sequences) W += rank_sequences_weight_sum(config, s, step_options(s));
  all_reduce_sum(comm, std::span<double>(&W, 1));

  // Forward and backward of every sequence, gradients summed into the flat fp32 gradient. Under
  // ZeRO-0 the backward of the rank's last sequence hands each bucket to the communication stream
  // as soon as it has finished it (bucket_issue_schedule's order).
  const Backend& be = state.backend();
  be.zero(state.gradient(), std::size_t(layout.padded()) * sizeof(float));
  std::optional<BucketReduction<Backend>> buckets;
  if (layout.zero_stage() == 0) buckets.emplace(state, options.bucket_bytes);
  const RankSequences& last = sequences.back();
  const auto last_g = static_cast<std::uint32_t>(last.first_global_index + last.num_sequences() - 1);
  const GradientsFinalObserver reduce_when_final = [&](std::uint32_t g, std::size_t first) {
    if (g == last_g) buckets->gradients_final_from(first);
  };
  double sums[3] = {0, 0, 0};       // loss, ce, kl
  std::int64_t counts[2] = {0, 0};  // correct, labelled rows
  std::vector<SequenceHits> hits;   // this rank's sequences' rows, for the block statistics
  for (const RankSequences& s : sequences) {
    DrafterStepOptions o = step_options(s);
    if (buckets && options.reduce_during_backward && &s == &last) o.gradients_final = &reduce_when_final;
    const LossHeadOptions loss_options = validate_drafter_step_options(config, o);  // the batch: drafter_weight_sum
    const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, *s.batch, o);
    validate_rank_teacher_rows(s, seqs);
    std::vector<std::vector<std::uint8_t>> seq_hits;
    const LossHeadStats<double> stats = be.drafter_sequences(host, config, state.weights(), *s.batch, o, loss_options,
                                                             seqs, W, &seq_hits, s.bf16_features);
    for (std::size_t b = 0; b < seqs.size(); ++b) {
      hits.push_back({seqs[b].slots.keep, seqs[b].blocks.valid, std::move(seq_hits[b])});
    }
    sums[0] += stats.loss;
    sums[1] += stats.ce;
    sums[2] += stats.kl;
    counts[0] += stats.correct;
    counts[1] += stats.valid_rows;
  }

  // Per tensor, this rank's own squared norms (ZeRO-0: taken as each bucket was handed over).
  std::optional<typename Backend::template Buffer<double>> norms;
  if (buckets) {
    if (!options.reduce_during_backward) {  // the same buckets, the same order, all after the backward
      for (const std::size_t first : gradients_final_positions(config.num_hidden_layers)) {
        buckets->gradients_final_from(first);
      }
    }
    buckets->finish();
  } else {
    const std::vector<FlatTensor>& tensors = layout.tensors();
    auto partials = be.template buffer<double>(MemoryCategory::transient, std::size_t(kNormMaxBlocks));
    norms.emplace(be.template buffer<double>(MemoryCategory::transient, tensors.size()));
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      be.squared_norm(state.gradient() + tensors[i].offset, tensors[i].numel, partials.data(), norms->data() + i);
    }
  }
  const double* local_norms = buckets ? buckets->local_squared_norms() : norms->data();

  // §12: nothing is applied anywhere if any rank saw a non-finite loss or gradient.
  require_finite_everywhere(comm, layout, t, train_step_detail::find_non_finite(state, local_norms, sums[0]),
                            options.last_good_checkpoint);
  all_reduce_sum(comm, std::span<double>(sums, 3));
  all_reduce_sum(comm, std::span<std::int64_t>(counts, 2));
  if (!buckets) train_step_detail::reduce_scatter_gradients(state);
  if (!std::isfinite(sums[0])) throw_non_finite(t, -1, "loss", "loss", options.last_good_checkpoint);
  const train_step_detail::AppliedStep applied =
      train_step_detail::apply_optimizer_step(state, training, options.last_good_checkpoint);
  state.refresh_working_copy();
  be.synchronize();

  StepMetrics m = step_metrics(t, sums, counts, W, applied.lr, applied.grad_norm, applied.clipped);
  m.sequence_hits = std::move(hits);
  return m;
}

}  // namespace dflash
