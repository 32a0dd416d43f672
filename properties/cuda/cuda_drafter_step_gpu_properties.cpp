// Properties of the whole CUDA step (cuda_drafter_step) on random small drafters: hidden, MLP and
// head sizes (GQA groups 1-3, head_dim 2-8), 1-3 layers of random sliding/full types and window,
// block size, anchor slots, vocabulary, K target layers, context length, one or two sequences,
// dropout rates at both sites, every trunk policy (every_k with k 1-3), loss policy and chunk
// size (1 row to beyond T):
//  - within SPEC §10's bf16 rule of the double reference step, the plain bf16 computation being
//    the step's own trunk on the CPU backend in bf16 plus the loss head's emulation
//    (harness/cuda/drafter_step_twin.hpp);
//  - two trunk policies (and the two chunked loss policies) give the same bits.
// Each property is one GoogleTest that skips, with the reason, where no GPU is usable.
#include <filesystem>
#include <ostream>

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "harness/cuda/config_path.hpp"
#include "harness/cuda/drafter_step_twin.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "reference/drafter_problem.hpp"

namespace dflash {
namespace {

struct StepCase {
  DrafterConfig config;
  DrafterBatchSpec batch;
  std::uint64_t param_seed = 0;
  TrunkPolicy trunk = TrunkPolicy::per_layer, other_trunk = TrunkPolicy::none;
  std::int64_t every = 1;
  LossPolicy loss = LossPolicy::chunk_recompute;
};

void showValue(const StepCase& c, std::ostream& os) {
  const DrafterConfig& k = c.config;
  os << "H=" << k.hidden_size << " I=" << k.intermediate_size << " nh=" << k.num_attention_heads
     << " nkv=" << k.num_key_value_heads << " d=" << k.head_dim << " L=" << k.num_hidden_layers << " types=";
  for (LayerType t : k.layer_types) os << (t == LayerType::sliding_attention ? 's' : 'f');
  os << " window=" << k.sliding_window.value_or(0) << " B=" << k.block_size << " N=" << k.max_anchors
     << " V=" << k.vocab_size << " K=" << k.target_layer_ids.size() << " S=" << c.batch.context_length
     << " seqs=" << c.batch.sequences << " dropout=" << k.attention_dropout << "/" << k.hidden_dropout
     << " chunk=" << k.loss_chunk_rows << " trunk=" << trunk_policy_name(c.trunk) << "(k=" << c.every << ") vs "
     << trunk_policy_name(c.other_trunk) << " loss=" << loss_policy_name(c.loss) << " seeds=" << c.param_seed << ","
     << c.batch.seed;
}

rc::Gen<StepCase> gen_case() {
  return rc::gen::exec([] {
    StepCase c;
    c.config = load_drafter_config(test_config_file("tiny.json"));
    DrafterConfig& k = c.config;
    k.hidden_size = 4 * *rc::gen::inRange(1, 7);
    k.intermediate_size = *rc::gen::inRange(4, 41);
    k.num_key_value_heads = *rc::gen::inRange(1, 3);
    k.num_attention_heads = k.num_key_value_heads * *rc::gen::inRange(1, 4);
    k.head_dim = 2 * *rc::gen::inRange(1, 5);
    k.num_hidden_layers = *rc::gen::inRange(1, 4);
    k.layer_types.clear();
    for (std::int64_t l = 0; l < k.num_hidden_layers; ++l) {
      k.layer_types.push_back(*rc::gen::element(LayerType::sliding_attention, LayerType::full_attention));
    }
    k.sliding_window = *rc::gen::inRange(1, 13);
    k.block_size = *rc::gen::inRange(2, 6);
    k.max_anchors = *rc::gen::inRange(1, 6);
    k.vocab_size = *rc::gen::inRange(8, 97);
    k.mask_token_id = k.vocab_size - 1;
    k.target_layer_ids.clear();
    for (std::int64_t i = 0, K = *rc::gen::inRange(1, 4); i < K; ++i) k.target_layer_ids.push_back(2 * i + 1);
    k.attention_dropout = *rc::gen::element(0.0, 0.1, 0.5);
    k.hidden_dropout = *rc::gen::element(0.0, 0.1, 0.5);
    const std::int64_t T = k.max_anchors * k.block_size;
    k.loss_chunk_rows = *rc::gen::oneOf(rc::gen::just(std::int64_t{1}), rc::gen::inRange<std::int64_t>(1, T + 1),
                                        rc::gen::inRange<std::int64_t>(T, T + 4));
    validate_drafter_config(k, "the generated config");
    c.batch.sequences = *rc::gen::inRange(1, 3);
    c.batch.context_length = *rc::gen::inRange(6, 31);
    c.batch.seed = *rc::gen::arbitrary<std::uint32_t>();
    c.param_seed = *rc::gen::arbitrary<std::uint32_t>();
    c.trunk = *rc::gen::elementOf(kAllTrunkPolicies);
    c.other_trunk = *rc::gen::elementOf(kAllTrunkPolicies);
    c.every = *rc::gen::inRange(1, 4);
    c.loss = *rc::gen::element(LossPolicy::materialize, LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward);
    return c;
  });
}

// The case's problem in the device formats (harness/cuda/drafter_step_twin.hpp).
struct CaseProblem {
  MemoryTracker tracker;
  DrafterParameters<double> params;
  FrozenWeights<double> frozen;
  DrafterBatch<double> batch;

  explicit CaseProblem(const StepCase& c)
      : params(init_drafter_parameters<double>(tracker, c.config, c.param_seed, 0.2)),
        frozen(init_frozen_weights<double>(tracker, c.config, c.param_seed + 1)),
        batch(make_drafter_batch<double>(tracker, c.config, c.batch)) {
    round_step_to_device_formats(params, frozen, batch);
  }
};

DrafterStepOptions options_of(const StepCase& c, TrunkPolicy trunk, LossPolicy loss) {
  DrafterStepOptions o = drafter_step_options(c.config, 2, 0);
  o.trunk_policy = trunk;
  o.checkpoint_every = c.every;
  o.loss_policy = loss;
  return o;
}

using CudaDrafterStepProperties = GpuTest;

TEST_F(CudaDrafterStepProperties, WithinTwiceThePlainBf16ErrorPlusFloorOfTheReference) {
  DeviceAllocator& device = allocator();
  EXPECT_TRUE(rc::check("CUDA step within 2 x plain bf16 error + floor of the double reference step", [&] {
    const StepCase c = *gen_case();
    CaseProblem p(c);
    const DrafterStepOptions o = options_of(c, c.trunk, c.loss);
    const StepValues exact = step_values(drafter_step(p.tracker, c.config, p.params, p.frozen, p.batch, o));
    const StepValues plain = plain_bf16_drafter_step(c.config, p.params, p.frozen, p.batch, o);
    const StepValues got = step_values(cuda_drafter_step(device, p.tracker, c.config, p.params, p.frozen, p.batch, o));
    const std::vector<RuleLine> lines = step_rule_lines(p.params, got, plain, exact);
    RC_LOG() << describe(lines);
    for (const RuleLine& l : lines) RC_ASSERT(l.ok());
  }));
}

TEST_F(CudaDrafterStepProperties, TrunkPoliciesAndChunkedLossPoliciesAgreeBitwise) {
  DeviceAllocator& device = allocator();
  EXPECT_TRUE(rc::check("two trunk policies, and chunk_recompute vs chunk_grad_in_forward, give the same bits", [&] {
    const StepCase c = *gen_case();
    CaseProblem p(c);
    const bool chunked = c.loss != LossPolicy::materialize;
    const LossPolicy other_loss = !chunked                                ? c.loss
                                  : c.loss == LossPolicy::chunk_recompute ? LossPolicy::chunk_grad_in_forward
                                                                          : LossPolicy::chunk_recompute;
    const std::vector<double> a = flattened(step_values(
        cuda_drafter_step(device, p.tracker, c.config, p.params, p.frozen, p.batch, options_of(c, c.trunk, c.loss))));
    const std::vector<double> b = flattened(step_values(cuda_drafter_step(
        device, p.tracker, c.config, p.params, p.frozen, p.batch, options_of(c, c.other_trunk, other_loss))));
    RC_ASSERT(a.size() == b.size());
    for (std::size_t e = 0; e < a.size(); ++e) RC_ASSERT(same_bits(a[e], b[e]));
  }));
}

}  // namespace
}  // namespace dflash
