// The loss head (every policy) and a drafter step (every trunk policy, dropout on) return the same
// bits on 1, 2 and 3 threads. Split across threads there: the products (reference/linalg.cpp runs
// those under 2^16 multiply-adds on one thread, so the shapes are large enough), the loss head's
// row statistics and dL/dz rows, attention by heads (forward) and kv heads (backward), RMSNorm,
// q/k norm + RoPE, SwiGLU and the dropped residuals by rows. The thread count changes no tracked
// peak but the transient one (attention's score rows are one set per part), and a dropout
// observer still sees the one-thread order. The runs after the first reuse pooled storage.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <tuple>
#include <vector>

#include "reference/drafter.hpp"
#include "reference/drafter_problem.hpp"
#include "reference/loss_head.hpp"
#include "reference/loss_head_problem.hpp"
#include "reference/storage_pool.hpp"
#include "reference/threads.hpp"
#include "tests/reference/thread_count.hpp"
#include "tests/reference/tiny_config.hpp"

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

// The tracker's peak per category, every category but `except`.
std::vector<std::size_t> peaks(const MemoryTracker& t, std::optional<MemoryCategory> except = std::nullopt) {
  std::vector<std::size_t> p;
  for (int i = 0; i < kMemoryCategoryCount; ++i) {
    const auto c = static_cast<MemoryCategory>(i);
    if (c != except) p.push_back(t.peak(c));
  }
  return p;
}

// run(tracker) returns the bits of a run; those and the tracker's peaks (all but `unchecked`) must
// be the same for 2 and 3 threads as for 1. The later runs draw their tensors' storage from blocks
// the earlier ones gave back to the storage pool (reference/storage_pool.hpp), so this also checks
// that reused storage gives the bits and tracked peaks of fresh storage.
template <class Run>
void expect_same_bits_for_1_2_3_threads(Run run, std::optional<MemoryCategory> unchecked = std::nullopt) {
  MemoryTracker one_tracker;
  Bits one;
  {
    const ThreadCount count(1);
    one = run(one_tracker);
  }
  for (int threads : {2, 3}) {
    const ThreadCount count(threads);
    MemoryTracker tracker;
    const std::uint64_t reused = storage_pool_state().reused;
    EXPECT_TRUE(run(tracker).bytes == one.bytes) << threads << " threads differ from 1";
    EXPECT_GT(storage_pool_state().reused, reused) << threads << " threads: no tensor reused a pooled block";
    EXPECT_EQ(peaks(tracker, unchecked), peaks(one_tracker, unchecked)) << threads << " threads";
  }
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
    expect_same_bits_for_1_2_3_threads([&](MemoryTracker& tracker) {
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

// configs/tiny.json widened so that its products are split, with 6 query heads on 3 kv heads (the
// attention passes split 2 and 3 ways) and dropout at every site.
DrafterConfig wide_tiny_config() {
  DrafterConfig config = load_drafter_config(tiny_config_path());
  config.hidden_size = 64;
  config.intermediate_size = 192;
  config.num_attention_heads = 6;
  config.num_key_value_heads = 3;
  config.head_dim = 16;
  config.vocab_size = 512;
  config.mask_token_id = 511;
  config.max_anchors = 8;
  config.attention_dropout = 0.1;
  config.hidden_dropout = 0.1;
  validate_drafter_config(config);
  return config;
}

// Parameters, frozen weights and a batch of `sequences` sequences of 48 context rows for it.
struct WideTinyProblem {
  DrafterConfig config = wide_tiny_config();
  MemoryTracker data;
  DrafterParameters<double> params = init_drafter_parameters<double>(data, config, 1, 0.2);
  FrozenWeights<double> frozen = init_frozen_weights<double>(data, config, 2);
  DrafterBatch<double> batch;
  explicit WideTinyProblem(std::int64_t sequences)
      : batch(make_drafter_batch<double>(data, config, {.sequences = sequences, .context_length = 48, .seed = 3})) {}
  DrafterStepResult<double> step(MemoryTracker& tracker, const DrafterStepOptions& options) const {
    return drafter_step(tracker, config, params, frozen, batch, options);
  }
};

TEST(ReferenceThreads, DrafterStepIsBitwiseTheSameForOneTwoAndThreeThreads) {
  const WideTinyProblem p(2);
  for (TrunkPolicy policy : {TrunkPolicy::none, TrunkPolicy::per_layer}) {
    SCOPED_TRACE(trunk_policy_name(policy));
    DrafterStepOptions options = drafter_step_options(p.config, 1, 0);
    options.trunk_policy = policy;
    options.loss_policy = LossPolicy::chunk_grad_in_forward;
    options.loss_chunk_rows = 24;
    expect_same_bits_for_1_2_3_threads(
        [&](MemoryTracker& tracker) {
          const DrafterStepResult<double> r = p.step(tracker, options);
          Bits b;
          b.add(r.outputs.stats.loss);
          b.add(r.outputs.lse);
          b.add(r.outputs.hidden);
          r.grads.for_each([&](const std::string&, const Tensor<double>& t) { b.add(t); });
          b.add(r.target_features_grad);
          return b;
        },
        MemoryCategory::transient);
  }
}

TEST(ReferenceThreads, DropoutObserverSeesTheOneThreadOrderOnThreeThreads) {
  const WideTinyProblem p(1);
  auto draws = [&](int threads) {
    const ThreadCount count(threads);
    std::vector<std::tuple<int, std::uint32_t, int, std::uint64_t, bool>> seen;
    const DropoutObserver observer = [&](const DropoutDraw& d) {
      seen.emplace_back(static_cast<int>(d.pass), d.layer, static_cast<int>(d.site), d.element, d.kept);
    };
    DrafterStepOptions options = drafter_step_options(p.config, 1, 0);
    options.dropout_observer = &observer;
    MemoryTracker tracker;
    p.step(tracker, options);
    return seen;
  };
  const auto one = draws(1);
  EXPECT_FALSE(one.empty());
  EXPECT_TRUE(draws(3) == one);
}

}  // namespace
}  // namespace dflash
