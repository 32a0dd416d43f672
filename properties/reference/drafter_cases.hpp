// Random small drafter problems for the properties: random H, nh/nkv ratios, even d, B, N, S,
// full and sliding layers, loss-mask holes, invalid blocks (kappa = 0), dropout on and off,
// sampled or explicit anchors, decay or none, and random step / global sequence offset.
#pragma once

#include <cstdint>
#include <ostream>

#include <rapidcheck.h>
#include <nlohmann/json.hpp>

#include "reference/drafter.hpp"
#include "reference/drafter_problem.hpp"

namespace dflash {

struct DrafterCase {
  DrafterConfig config;
  DrafterBatchSpec batch;
  std::uint64_t parameter_seed = 1;
  DrafterStepOptions options;
};

inline void showValue(const DrafterCase& c, std::ostream& os) {
  os << drafter_config_to_json(c.config).dump() << "\nbatch: nseq=" << c.batch.sequences
     << " S=" << c.batch.context_length << " seed=" << c.batch.seed << " holes=" << c.batch.mask_hole_fraction
     << " explicit_anchors=" << c.batch.explicit_anchors << " N=" << c.batch.anchor_slots
     << " invalid_blocks=" << c.batch.invalid_block_fraction << "\nparameter_seed=" << c.parameter_seed
     << " step=" << c.options.step << " sequence_offset=" << c.options.sequence_offset
     << " trunk=" << trunk_policy_name(c.options.trunk_policy) << "/" << c.options.checkpoint_every
     << " loss=" << loss_policy_name(c.options.loss_policy) << "/" << c.options.loss_chunk_rows;
}

struct DrafterCaseLimits {
  int max_hidden = 6;
  int max_intermediate = 6;
  int max_layers = 2;
  int max_context = 8;
  int max_vocab = 10;
  int max_anchors = 3;
  int max_sequences = 2;
};

// Sizes below the limits; dropout on in about half the cases.
inline rc::Gen<DrafterCase> gen_drafter_case(DrafterCaseLimits lim = {}) {
  return rc::gen::exec([lim] {
    DrafterCase c;
    DrafterConfig& f = c.config;
    f.hidden_size = *rc::gen::inRange(2, lim.max_hidden + 1);
    f.intermediate_size = *rc::gen::inRange(1, lim.max_intermediate + 1);
    f.num_key_value_heads = *rc::gen::inRange(1, 3);
    f.num_attention_heads = f.num_key_value_heads * *rc::gen::inRange(1, 3);
    f.head_dim = *rc::gen::element(2, 4);
    f.num_hidden_layers = *rc::gen::inRange(1, lim.max_layers + 1);
    f.vocab_size = *rc::gen::inRange(2, lim.max_vocab + 1);
    f.mask_token_id = *rc::gen::inRange<std::int64_t>(0, f.vocab_size);
    f.block_size = *rc::gen::inRange(2, 4);
    f.target_layer_ids.assign(static_cast<std::size_t>(*rc::gen::inRange(1, 3)), 3);
    f.rope_theta = *rc::gen::element(100.0, 10000.0);
    f.rms_norm_eps = 1e-6;
    for (std::int64_t l = 0; l < f.num_hidden_layers; ++l) {
      f.layer_types.push_back(*rc::gen::element(LayerType::full_attention, LayerType::sliding_attention));
    }
    c.batch.context_length = *rc::gen::inRange(2, lim.max_context + 1);
    f.sliding_window = *rc::gen::inRange<std::int64_t>(1, c.batch.context_length + 2);
    f.max_anchors = *rc::gen::inRange(1, lim.max_anchors + 1);
    if (*rc::gen::arbitrary<bool>()) f.loss_decay_gamma = *rc::gen::inRange(5, 41) / 10.0;
    f.hard_weight = *rc::gen::inRange(0, 101) / 100.0;
    f.soft_weight = *rc::gen::inRange(0, 101) / 100.0;
    f.temperature = *rc::gen::element(0.5, 1.0, 2.0);
    const bool dropout = *rc::gen::arbitrary<bool>();
    f.attention_dropout = dropout ? *rc::gen::element(0.1, 0.3, 0.5) : 0.0;
    f.hidden_dropout = dropout ? *rc::gen::element(0.0, 0.2, 0.4) : 0.0;
    f.seed = *rc::gen::arbitrary<std::uint64_t>();
    f.loss_chunk_rows = *rc::gen::inRange(1, 8);
    validate_drafter_config(f);

    c.batch.sequences = *rc::gen::inRange(1, lim.max_sequences + 1);
    c.batch.seed = *rc::gen::arbitrary<std::uint32_t>();
    c.batch.mask_hole_fraction = *rc::gen::element(0.0, 0.2, 0.5);
    c.batch.explicit_anchors = *rc::gen::arbitrary<bool>();
    c.batch.anchor_slots = *rc::gen::inRange(1, lim.max_anchors + 1);
    c.batch.invalid_block_fraction = *rc::gen::element(0.0, 0.3);
    c.parameter_seed = *rc::gen::arbitrary<std::uint32_t>();
    c.options = drafter_step_options(f, *rc::gen::arbitrary<std::uint32_t>(), *rc::gen::inRange(0u, 1000u));
    c.options.trunk_policy = *rc::gen::element(TrunkPolicy::none, TrunkPolicy::per_layer, TrunkPolicy::every_k);
    c.options.checkpoint_every = *rc::gen::inRange(1, 4);
    c.options.loss_policy = *rc::gen::element(LossPolicy::materialize, LossPolicy::chunk_retain,
                                              LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward);
    return c;
  });
}

// The data of a case, in double, counted by one tracker that outlives every result.
struct DrafterProblem {
  MemoryTracker tracker;
  DrafterParameters<double> params;
  FrozenWeights<double> frozen;
  DrafterBatch<double> batch;

  explicit DrafterProblem(const DrafterCase& c)
      : params(init_drafter_parameters<double>(tracker, c.config, c.parameter_seed, 0.3)),
        frozen(init_frozen_weights<double>(tracker, c.config, c.parameter_seed + 1)),
        batch(make_drafter_batch<double>(tracker, c.config, c.batch)) {}

  DrafterStepResult<double> step(const DrafterCase& c, const DrafterStepOptions& options) {
    return drafter_step(tracker, c.config, params, frozen, batch, options);
  }
};

}  // namespace dflash
