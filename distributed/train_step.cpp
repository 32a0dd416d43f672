#include "distributed/train_step.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "common/adamw.hpp"
#include "distributed/gradient_reduction.hpp"
#include "distributed/step_checks.hpp"
#include "io/errors.hpp"

namespace dflash {

TrainingState make_training_state(MemoryTracker& tracker, const DrafterConfig& config, const TrainingConfig& training,
                                  const Communicator& comm, DrafterParameters<double> initial) {
  validate_training_config(training);
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
  std::size_t index = 0;
  if (static_cast<std::int64_t>(initial.layers.size()) != config.num_hidden_layers) {
    throw_input_error("initial parameters",
                      str(initial.layers.size(), " layers for num_hidden_layers = ", config.num_hidden_layers));
  }
  initial.for_each([&](const std::string& name, const Tensor<double>& t) {
    if (t.shape() != shapes.at(index++).shape) {
      throw_input_error(name, str("shape ", shape_string(t.shape()), " does not match the config's"));
    }
  });
  const FlatLayout layout(config, comm.size(), training.zero_stage);
  OptimizerState optimizer = make_optimizer_state(tracker, layout, comm.rank(), initial);
  return TrainingState{std::move(initial), std::move(optimizer)};
}

void require_same_config(Communicator& comm, const DrafterConfig& config, const TrainingConfig& training) {
  nlohmann::json j = drafter_config_to_json(config);
  j.update(training_config_to_json(training));
  const std::string text = j.dump();
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a 64 of the canonical JSON
  for (unsigned char ch : text) hash = (hash ^ ch) * 1099511628211ull;
  std::vector<std::int64_t> hashes(static_cast<std::size_t>(comm.size()));
  const auto mine = static_cast<std::int64_t>(hash);
  comm.all_gather(&mine, hashes.data(), 1, CommType::i64);
  std::string differing;
  for (int r = 1; r < comm.size(); ++r) {
    if (hashes[static_cast<std::size_t>(r)] != hashes[0])
      differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!differing.empty()) {
    throw_input_error("config", str("rank(s) ", differing, " of ", comm.size(),
                                    " hold a drafter or training config "
                                    "different from rank 0's; every rank must start from the same config"));
  }
}

namespace {

// The gradients first (the tensors §12 asks to name; the reduction saw the rank's first non-finite
// element in canonical order before summing over ranks), then the loss.
NonFiniteReport non_finite_report(double local_loss, const FlatLayout& layout, std::int64_t first_non_finite) {
  if (first_non_finite >= 0) {
    const std::size_t t = layout.tensor_at(first_non_finite);
    return {2, static_cast<std::int64_t>(t), first_non_finite - layout.tensors()[t].offset};
  }
  if (!std::isfinite(local_loss)) return {1, 0, 0};
  return {};
}

// The updated parameters into every rank's working copy: ZeRO-0 copies the (whole) master
// weights; ZeRO-1 all-gathers every rank's shard through the gradient buckets.
void publish_parameters(Communicator& comm, const FlatLayout& layout, const GradientBuckets& buckets,
                        const OptimizerState& opt, DrafterParameters<double>& params, Tensor<double>& bucket) {
  const int R = comm.size();
  if (layout.zero_stage() == 0 || R == 1) {
    write_flat(layout, params, opt.offset, opt.master.span());
    return;
  }
  const std::int64_t s = layout.shard_size();
  for (std::int64_t k = 0; k < buckets.count(); ++k) {
    const std::int64_t at = buckets.first(k), n = buckets.elements(k);
    double* own = bucket.data() + comm.rank() * n;
    std::copy_n(opt.master.data() + at, n, own);
    comm.all_gather(own, bucket.data(), static_cast<std::size_t>(n), CommType::f64);
    for (int r = 0; r < R; ++r) {
      write_flat(layout, params, r * s + at, {bucket.data() + r * n, static_cast<std::size_t>(n)});
    }
  }
}

// Calls visit(tensor index, element within the tensor, position within the part) for every element
// of this rank's part of the flat vector that is a real parameter (padding skipped).
template <class Visit>
void for_each_owned(const FlatLayout& layout, const OptimizerState& opt, Visit visit) {
  const std::int64_t end = std::min(opt.offset + opt.master.numel(), layout.count());
  for (std::size_t t = 0; t < layout.tensors().size(); ++t) {
    const FlatTensor& ft = layout.tensors()[t];
    const std::int64_t lo = std::max(ft.offset, opt.offset), hi = std::min(ft.offset + ft.numel, end);
    for (std::int64_t e = lo; e < hi; ++e) visit(t, e - ft.offset, e - opt.offset);
  }
}

}  // namespace

OptimizerStepResult apply_optimizer_step(Communicator& comm, const FlatLayout& layout, const TrainingConfig& training,
                                         OptimizerState& opt, const DrafterParameters<double>& grads,
                                         const std::string& last_good_checkpoint) {
  const std::int64_t t = opt.step;
  // The global norm over the whole flat gradient: ZeRO-0 ranks all hold it; ZeRO-1 ranks add their shards'.
  const std::vector<const Tensor<double>*> g = flat_tensors(grads);
  double norm_squared = 0;
  for_each_owned(layout, opt, [&](std::size_t ti, std::int64_t i, std::int64_t) {
    const double x = (*g[ti])[i];
    norm_squared += x * x;
  });
  if (layout.zero_stage() == 1) all_reduce_sum(comm, std::span<double>(&norm_squared, 1));
  const double norm = std::sqrt(norm_squared);
  if (!std::isfinite(norm)) throw_non_finite(t, -1, "gradient norm", "gradient norm", last_good_checkpoint);

  const double coefficient = clip_coefficient(norm, training.max_grad_norm);
  const double lr = learning_rate_at(t, training.learning_rate, training.min_learning_rate, training.warmup_steps,
                                     training.total_steps);
  const AdamWScalars decayed = adamw_scalars(lr, training.weight_decay, true, training.adam_beta1, training.adam_beta2,
                                             training.adam_epsilon, t);
  const AdamWScalars plain = adamw_scalars(lr, training.weight_decay, false, training.adam_beta1, training.adam_beta2,
                                           training.adam_epsilon, t);
  for_each_owned(layout, opt, [&](std::size_t ti, std::int64_t i, std::int64_t at) {
    const double gradient = (*g[ti])[i] * coefficient;
    adamw_update(opt.master[at], opt.exp_avg[at], opt.exp_avg_sq[at], gradient,
                 layout.tensors()[ti].decay ? decayed : plain);
  });
  ++opt.step;
  return {lr, norm, coefficient < 1.0};
}

StepMetrics train_step(MemoryTracker& tracker, Communicator& comm, const DrafterConfig& config,
                       const TrainingConfig& training, const FrozenWeights<double>& frozen, TrainingState& state,
                       std::span<const RankSequences> sequences, const TrainStepOptions& options) {
  validate_training_config(training);
  const GlobalBatchLayout batch_layout = GlobalBatchLayout::of(training, comm.size());
  const FlatLayout layout(config, comm.size(), training.zero_stage);
  OptimizerState& opt = state.optimizer;
  if (opt.master.numel() != layout.shard_size() || opt.offset != layout.shard_offset(comm.rank())) {
    throw_input_error("optimizer state",
                      str("holds ", opt.master.numel(), " elements from ", opt.offset, "; rank ", comm.rank(), " of ",
                          comm.size(), " under ZeRO-", training.zero_stage, " owns ", layout.shard_size(), " from ",
                          layout.shard_offset(comm.rank())));
  }
  check_rank_sequences(batch_layout, comm.rank(), training, sequences);
  if (options.bucket_bytes < 1) throw_input_error("bucket_bytes", str(options.bucket_bytes, " must be at least 1"));
  const std::int64_t t = opt.step;
  if (t >= (std::int64_t(1) << 32)) throw_input_error("optimizer step", str(t, " exceeds the 32-bit RNG counter word"));
  auto step_options = [&](const RankSequences& s) {
    DrafterStepOptions o =
        drafter_step_options(config, static_cast<std::uint32_t>(t), static_cast<std::uint32_t>(s.first_global_index));
    o.dropout_observer = options.dropout_observer;
    return o;
  };

  // W over the whole global batch, before any backward (§11: w depends only on data and anchors).
  double W = 0;
  for (const RankSequences& s : sequences) W += rank_sequences_weight_sum(config, s, step_options(s));
  all_reduce_sum(comm, std::span<double>(&W, 1));

  // Forward and backward of every sequence, gradients summed into one accumulator. The backward of
  // the last sequence issues each bucket's sum over ranks as soon as it has finished the bucket.
  DrafterParameters<double> grads = make_drafter_parameters<double>(tracker, config, MemoryCategory::gradients);
  const ParallelLayout plan_layout = layout.parallel_layout(options.bucket_bytes, 1);
  const GradientBuckets buckets = gradient_buckets(layout.count(), plan_layout, sizeof(double));
  Tensor<double> bucket;
  if (comm.size() > 1) {
    bucket = Tensor<double>(tracker, MemoryCategory::communication,
                            {bucket_elements(layout.count(), plan_layout, sizeof(double))});
  }
  GradientReduction reduction(comm, layout, buckets, grads, bucket);
  const RankSequences& last = sequences.back();
  const auto last_g = static_cast<std::uint32_t>(last.first_global_index + last.num_sequences() - 1);
  const GradientsFinalObserver reduce_when_final = [&](std::uint32_t g, std::size_t first) {
    if (g == last_g) reduction.gradients_final_from(first);
  };
  double sums[3] = {0, 0, 0};       // loss, ce, kl
  std::int64_t counts[2] = {0, 0};  // correct, labelled rows
  std::vector<SequenceHits> hits;
  for (const RankSequences& s : sequences) {
    DrafterStepOptions o = step_options(s);
    if (options.reduce_during_backward && &s == &last) o.gradients_final = &reduce_when_final;
    const SequenceAtTurn turn(tracker, s);
    const DrafterOutputs<double> out = drafter_step_accumulate(tracker, config, state.params, frozen, turn.batch(), o,
                                                               std::optional<double>(W), grads);
    sums[0] += out.stats.loss;
    sums[1] += out.stats.ce;
    sums[2] += out.stats.kl;
    counts[0] += out.stats.correct;
    counts[1] += out.stats.valid_rows;
    const std::int64_t N = out.keep.dim(1), T = out.weights.dim(1);
    for (std::int64_t b = 0; b < out.keep.dim(0); ++b) {
      auto rows_of = [&](const std::vector<std::uint8_t>& v) {
        return std::vector<std::uint8_t>(v.begin() + b * T, v.begin() + (b + 1) * T);
      };
      hits.push_back(
          {std::vector<std::uint8_t>(out.keep.row(b), out.keep.row(b) + N), rows_of(out.labelled), rows_of(out.hits)});
    }
  }

  if (!options.reduce_during_backward) {
    for (const std::size_t first : gradients_final_positions(config.num_hidden_layers)) {
      reduction.gradients_final_from(first);
    }
  }

  // §12: nothing is applied anywhere if any rank saw a non-finite loss or gradient.
  require_finite_everywhere(comm, layout, t, non_finite_report(sums[0], layout, reduction.first_non_finite()),
                            options.last_good_checkpoint);
  all_reduce_sum(comm, std::span<double>(sums, 3));
  all_reduce_sum(comm, std::span<std::int64_t>(counts, 2));

  if (!std::isfinite(sums[0])) throw_non_finite(t, -1, "loss", "loss", options.last_good_checkpoint);
  const OptimizerStepResult applied =
      apply_optimizer_step(comm, layout, training, opt, grads, options.last_good_checkpoint);
  grads = DrafterParameters<double>{};  // the gradients are spent before the parameters are published
  publish_parameters(comm, layout, buckets, opt, state.params, bucket);

  StepMetrics m = step_metrics(t, sums, counts, W, applied.lr, applied.grad_norm, applied.clipped);
  m.sequence_hits = std::move(hits);
  return m;
}

}  // namespace dflash
