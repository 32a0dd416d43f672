// A small training problem for the distributed tests: a tiny drafter config with dropout on, a
// training config whose clipping is active and whose warm-up and decay are non-trivial, and the
// data of global sequence g of step t, which depends on (t, g) only, never on the rank that loads it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "distributed/train_step.hpp"
#include "reference/drafter_problem.hpp"

namespace dflash::testing {

inline DrafterConfig tiny_drafter_config() {
  DrafterConfig c;
  c.hidden_size = 8;
  c.intermediate_size = 10;  // P = 1056, not a multiple of 128: ZeRO-1 pads for every R > 1
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  c.num_hidden_layers = 2;
  c.vocab_size = 24;
  c.block_size = 3;
  c.mask_token_id = 23;
  c.target_layer_ids = {1, 3};
  c.layer_types = {LayerType::sliding_attention, LayerType::full_attention};
  c.sliding_window = 4;
  c.max_anchors = 3;
  c.attention_dropout = 0.1;
  c.hidden_dropout = 0.15;
  c.seed = 77;
  c.loss_chunk_rows = 5;
  validate_drafter_config(c);
  return c;
}

inline TrainingConfig tiny_training_config(std::int64_t global, std::int64_t micro_steps, int zero_stage) {
  TrainingConfig t;
  t.learning_rate = 0.02;
  t.min_learning_rate = 0.002;
  t.warmup_steps = 1;
  t.total_steps = 4;
  t.weight_decay = 0.1;
  t.max_grad_norm = 0.5;  // below the tiny problem's gradient norms: clipping is active
  t.global_batch_sequences = global;
  t.micro_steps = micro_steps;
  t.zero_stage = zero_stage;
  t.max_context = 16;
  validate_training_config(t);
  return t;
}

// Context length of sequence g: three lengths, so a rank's sequences differ in S.
inline std::int64_t context_of(std::int64_t g) { return 10 + g % 3; }

inline bool all_labelled(std::int64_t) { return false; }

// The tiny drafter ready to train on one rank of `comm`: frozen weights and parameters from fixed
// seeds, a fresh optimizer state; the tracker counts all of it (declared first: it outlives them).
struct TinyTrainer {
  TinyTrainer(const Communicator& comm, const TrainingConfig& training, DrafterConfig drafter = tiny_drafter_config())
      : config(std::move(drafter)),
        frozen(init_frozen_weights<double>(tracker, config, 5)),
        state(make_training_state(tracker, config, training, comm,
                                  init_drafter_parameters<double>(tracker, config, 3, 0.2))) {}
  DrafterConfig config;
  MemoryTracker tracker;
  FrozenWeights<double> frozen;
  TrainingState state;
};

struct SequenceData {
  std::int64_t g;
  DrafterBatch<double> batch;
};

// Global sequences `gs` of step t, one batch each (their lengths differ). `unlabelled(g)`: an
// all-zero loss mask (no anchor, weight 0).
template <class Unlabelled>
std::vector<SequenceData> load_sequences(MemoryTracker& tracker, const DrafterConfig& config, std::int64_t step,
                                         const std::vector<std::int64_t>& gs, Unlabelled unlabelled) {
  std::vector<SequenceData> out;
  for (std::int64_t g : gs) {
    const DrafterBatchSpec spec{.sequences = 1,
                                .context_length = context_of(g),
                                .seed = std::uint64_t(1000 + 100 * step + g),
                                .mask_hole_fraction = unlabelled(g) ? 1.0 : 0.2};
    out.push_back({g, make_drafter_batch<double>(tracker, config, spec)});
  }
  return out;
}

inline std::vector<RankSequences> as_rank_sequences(const std::vector<SequenceData>& data) {
  std::vector<RankSequences> out;
  for (const SequenceData& d : data) out.push_back({d.g, &d.batch});
  return out;
}

}  // namespace dflash::testing
