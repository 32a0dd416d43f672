#include "distributed/run/step_backend.hpp"

namespace dflash {

std::map<std::string, std::int64_t> peak_bytes_of(const MemoryTracker& tracker) {
  std::map<std::string, std::int64_t> out;
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    const auto category = static_cast<MemoryCategory>(c);
    out[std::string(category_name(category))] = static_cast<std::int64_t>(tracker.peak(category));
  }
  return out;
}

namespace {

class ReferenceStepBackend final : public StepBackend {
 public:
  ReferenceStepBackend(MemoryTracker& tracker, Communicator& comm, const DrafterConfig& config,
                       const TrainingConfig& training, const FrozenWeights<double>& frozen, TrainingState state)
      : tracker_(tracker),
        comm_(comm),
        config_(config),
        training_(training),
        frozen_(frozen),
        state_(std::move(state)) {}
  // Over frozen weights read whole from `source` and kept.
  ReferenceStepBackend(MemoryTracker& tracker, Communicator& comm, const DrafterConfig& config,
                       const TrainingConfig& training, const FrozenWeightSource& source, TrainingState state)
      : tracker_(tracker),
        comm_(comm),
        config_(config),
        training_(training),
        owned_frozen_(load_frozen_weights(tracker, config, source)),
        frozen_(owned_frozen_),
        state_(std::move(state)) {}

  std::int64_t completed_steps() const override { return state_.optimizer.step; }
  SequenceEvaluation forward_statistics(const DrafterConfig& config, const DrafterBatch<double>& batch,
                                        const DrafterStepOptions& options,
                                        const Bf16Features* bf16 = nullptr) override {
    MemoryTracker scratch;  // host memory of the evaluation, apart from the step's peaks
    const RankSequences s{options.sequence_offset, &batch, bf16};
    const SequenceAtTurn turn(scratch, s);
    const DrafterOutputs<double> out =
        drafter_forward(scratch, config, state_.params, frozen_, turn.batch(), options, std::optional<double>(1.0));
    SequenceEvaluation e{out.stats, 0.0, BlockStatistics(config.block_size)};
    for (std::int64_t i = 0; i < out.weights.numel(); ++i) e.weight_sum += out.weights[i];
    add_block_statistics(e.blocks, config.block_size, out);
    return e;
  }
  StepMetrics step(std::span<const RankSequences> sequences, const TrainStepOptions& options) override {
    return train_step(tracker_, comm_, config_, training_, frozen_, state_, sequences, options);
  }
  FlatValues gather_optimizer(OptimizerPart part, bool to_this_rank) override {
    const FlatLayout layout(config_, comm_.size(), training_.zero_stage);
    const OptimizerState& o = state_.optimizer;
    std::vector<double> full = gather_full(comm_, layout,
                                           part == OptimizerPart::master    ? o.master
                                           : part == OptimizerPart::exp_avg ? o.exp_avg
                                                                            : o.exp_avg_sq);
    if (!to_this_rank) full = {};  // the collective gives every rank the whole: not kept
    return full;
  }
  safetensors::Dtype master_dtype() const override { return safetensors::Dtype::F64; }
  std::map<std::string, std::int64_t> peak_bytes() const override { return peak_bytes_of(tracker_); }
  void reset_peaks() override { tracker_.reset_peaks(); }

 private:
  MemoryTracker& tracker_;
  Communicator& comm_;
  const DrafterConfig& config_;
  const TrainingConfig& training_;
  FrozenWeights<double> owned_frozen_;  // empty unless made from a source
  const FrozenWeights<double>& frozen_;
  TrainingState state_;
};

}  // namespace

std::unique_ptr<StepBackend> make_reference_step_backend(MemoryTracker& tracker, Communicator& comm,
                                                         const DrafterConfig& config, const TrainingConfig& training,
                                                         const FrozenWeights<double>& frozen, TrainingState state) {
  return std::make_unique<ReferenceStepBackend>(tracker, comm, config, training, frozen, std::move(state));
}

std::unique_ptr<StepBackend> make_reference_step_backend(MemoryTracker& tracker, Communicator& comm,
                                                         const DrafterConfig& config, const TrainingConfig& training,
                                                         const FrozenWeightSource& source, TrainingState state) {
  return std::make_unique<ReferenceStepBackend>(tracker, comm, config, training, source, std::move(state));
}

}  // namespace dflash
