// The loss head (every policy) and a drafter step return the same bits on 1, 2 and 3 threads.
// The shapes are chosen so that their products are large enough to be split across threads
// (reference/linalg.cpp runs products under 2^16 multiply-adds on one thread).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "reference/drafter.hpp"
#include "reference/drafter_problem.hpp"
#include "reference/loss_head.hpp"
#include "reference/loss_head_problem.hpp"
#include "reference/threads.hpp"

namespace dflash {
namespace {

// Every value a run produces, as one byte string (bitwise comparison, NaN-safe).
struct Bits {
  std::vector<unsigned char> bytes;
  void add(const double* v, std::int64_t n) {
    const auto* p = reinterpret_cast<const unsigned char*>(v);
    bytes.insert(bytes.end(), p, p + n * static_cast<std::int64_t>(sizeof(double)));
  }
  void add(const Tensor<double>& t) { add(t.data(), t.numel()); }
  void add(double v) { add(&v, 1); }
};

template <class Run>
void expect_same_bits_for_1_2_3_threads(Run run) {
  const int saved = reference_threads();
  set_reference_threads(1);
  const Bits one = run();
  for (int threads : {2, 3}) {
    set_reference_threads(threads);
    EXPECT_TRUE(run().bytes == one.bytes) << threads << " threads differ from 1";
  }
  set_reference_threads(saved);
}

TEST(ReferenceThreads, LossHeadIsBitwiseTheSameForOneTwoAndThreeThreads) {
  MemoryTracker data;
  const auto p = make_loss_head_problem<double>(data, {.rows = 48, .hidden = 40, .vocab = 700, .seed = 3});
  for (LossPolicy policy : {LossPolicy::materialize, LossPolicy::chunk_retain, LossPolicy::chunk_recompute,
                            LossPolicy::chunk_grad_in_forward}) {
    SCOPED_TRACE(loss_policy_name(policy));
    LossHeadOptions o;
    o.policy = policy;
    o.chunk_rows = 16;
    o.lm_head_grad = true;
    expect_same_bits_for_1_2_3_threads([&] {
      MemoryTracker tracker;
      const LossHeadResult<double> r = run_loss_head(tracker, o, p.hidden, p.targets(), p.weight_sum);
      Bits b;
      b.add(r.stats.loss);
      b.add(r.lse);
      b.add(r.token_loss);
      b.add(r.hidden_grad);
      b.add(*r.lm_head_grad);
      return b;
    });
  }
}

TEST(ReferenceThreads, DrafterStepIsBitwiseTheSameForOneTwoAndThreeThreads) {
  // configs/tiny.json widened so that its products are split, with dropout at every site.
  DrafterConfig config = load_drafter_config(std::filesystem::path(DFLASH_SOURCE_DIR) / "configs" / "tiny.json");
  config.hidden_size = 64;
  config.intermediate_size = 192;
  config.head_dim = 16;
  config.vocab_size = 512;
  config.mask_token_id = 511;
  config.max_anchors = 8;
  config.attention_dropout = 0.1;
  config.hidden_dropout = 0.1;
  MemoryTracker data;
  const auto params = init_drafter_parameters<double>(data, config, 1, 0.2);
  const auto frozen = init_frozen_weights<double>(data, config, 2);
  const auto batch = make_drafter_batch<double>(data, config, {.sequences = 2, .context_length = 48, .seed = 3});
  const DrafterStepOptions options = drafter_step_options(config, 1, 0);
  expect_same_bits_for_1_2_3_threads([&] {
    MemoryTracker tracker;
    const DrafterStepResult<double> r = drafter_step(tracker, config, params, frozen, batch, options);
    Bits b;
    b.add(r.outputs.stats.loss);
    b.add(r.outputs.hidden);
    r.grads.for_each([&](const std::string&, const Tensor<double>& t) { b.add(t); });
    b.add(r.target_features_grad);
    return b;
  });
}

}  // namespace
}  // namespace dflash
