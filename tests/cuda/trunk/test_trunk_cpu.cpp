// The trunk's orchestration (cuda/trunk/stack.hpp over cuda/trunk/layer.hpp: the code the GPU runs)
// on the CPU backend (harness/cuda/host_backend.hpp) with fp32 storage, against the double
// reference trunk (reference/drafter_trunk.hpp) on the tiny and mid configs with dropout at
// every site: Y, dL/dF and every parameter gradient within the fp32 rule (2 x the error of the
// reference trunk run in float, + the fp32 floor), every policy bitwise the same, and the saved
// bytes each policy keeps exactly as cuda/trunk/stack.hpp lists them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/tolerances.hpp"
#include "harness/cuda/host_backend.hpp"
#include "tests/cuda/trunk/twin_support.hpp"

namespace dflash {
namespace {

// The trunk on the CPU backend with fp32 storage; `saved_peak` gets the peak of saved bytes.
TrunkValues<float> twin_trunk(const TrunkProblem& p, TrunkPolicy policy, std::int64_t every, std::size_t* saved_peak) {
  MemoryTracker tracker;
  const TrunkValues<float> r = run_trunk(HostBackend<float>{tracker}, p, policy, every);
  *saved_peak = tracker.peak(MemoryCategory::saved);
  EXPECT_EQ(tracker.current(MemoryCategory::saved), 0u) << "backward frees what forward kept";
  return r;
}

class TrunkTwin : public ::testing::TestWithParam<TrunkCase> {};
INSTANTIATE_TEST_SUITE_P(Configs, TrunkTwin,
                         ::testing::Values(TrunkCase{"tiny.json", 11, 4}, TrunkCase{"mid.json", 300, 4}),
                         [](const auto& info) { return std::string(info.param.config).substr(0, 3); });

TEST_P(TrunkTwin, WithinFp32RuleOfDoubleReference) {
  TrunkProblem p(GetParam());
  const TrunkValues<double> exact = reference_trunk<double>(p);
  const TrunkValues<float> plain = reference_trunk<float>(p);
  std::size_t peak = 0;
  expect_trunk_within_rule(p, twin_trunk(p, TrunkPolicy::per_layer, 1, &peak), plain, exact, kAttentionFp32Floor);
}

TEST_P(TrunkTwin, PoliciesBitwiseEqualWithTheDocumentedSavedBytes) {
  TrunkProblem p(GetParam());
  const DrafterDims& m = p.dims;
  const std::size_t context = m.S * m.H * 4 * 2 + m.S * 4, input = m.T * m.H * 4, final = m.T * m.H * 4 + m.T * 4,
                    acts = TrunkLayerActivations<HostBackend<float>>::bytes(m);
  const auto L = static_cast<std::size_t>(m.L);
  std::size_t none_peak = 0, per_layer_peak = 0, every2_peak = 0;
  const TrunkValues<float> none = twin_trunk(p, TrunkPolicy::none, 1, &none_peak);
  const TrunkValues<float> per_layer = twin_trunk(p, TrunkPolicy::per_layer, 1, &per_layer_peak);
  const TrunkValues<float> every2 = twin_trunk(p, TrunkPolicy::every_k, 2, &every2_peak);
  EXPECT_EQ(none_peak, context + L * input + L * acts + final);
  EXPECT_EQ(per_layer_peak, context + L * input + acts);
  // every 2: boundaries 0, 2, ...; the peak is while the last full segment [s, s + 2) is
  // recomputed: the boundaries 0, 2, ..., s, its inner input s + 1, and 2 layers' activations.
  ASSERT_GE(L, 2u);
  const std::size_t last_full = (L - 2) / 2 * 2;
  EXPECT_EQ(every2_peak, context + (last_full / 2 + 2) * input + 2 * acts);
  for (const TrunkValues<float>* other : {&per_layer, &every2}) {
    ASSERT_EQ(other->hidden, none.hidden);
    ASSERT_EQ(other->grads, none.grads);
    ASSERT_EQ(other->features_grad, none.features_grad);
  }
}

// TrunkGrads are accumulated (+=): a sequence's gradients add to what the step's earlier sequences
// left, dL/dF included. The other tests start every buffer at 0, where writing over and adding
// give the same bits. Buffers that start as NaN must end as NaN in every element (NaN + x is NaN);
// an element written over instead of added to comes out finite.
TEST_P(TrunkTwin, GradientsAddToWhatTheirBuffersHold) {
  TrunkProblem p(GetParam());
  MemoryTracker tracker;
  const TrunkValues<float> r = run_trunk(HostBackend<float>{tracker}, p, TrunkPolicy::every_k, 2, nullptr,
                                         std::numeric_limits<float>::quiet_NaN());
  auto expect_all_nan = [](const std::string& name, const std::vector<float>& values) {
    for (std::size_t e = 0; e < values.size(); ++e) {
      ASSERT_TRUE(std::isnan(values[e])) << name << " element " << e << " was written over: " << values[e];
    }
  };
  std::vector<std::string> names;
  p.params.for_each([&](const std::string& name, const Tensor<double>&) { names.push_back(name); });
  ASSERT_EQ(names.size(), r.grads.size());
  for (std::size_t i = 0; i < r.grads.size(); ++i) expect_all_nan(names[i], r.grads[i]);
  expect_all_nan("dL/dF", r.features_grad);
}

}  // namespace
}  // namespace dflash
