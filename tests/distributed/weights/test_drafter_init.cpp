// The seeded initialisation of TRAINING §16: norms 1; matrix p, element e = 0.02 sqrt(-2 ln u1)
// cos(2 pi u2) from Philox((lo32 e, hi32 e, 0xFFFFE, p)) under the seed's key.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "common/philox.hpp"
#include "distributed/weights/drafter_init.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;

double box_muller_from_spec(std::uint64_t seed, std::uint32_t p, std::uint64_t e) {
  const Philox4x32 w = philox4x32_10(Philox4x32{{std::uint32_t(e), std::uint32_t(e >> 32), 0xFFFFEu, p}},
                                     Philox2x32Key{{std::uint32_t(seed), std::uint32_t(seed >> 32)}});
  const double u1 = (w.v[0] + 0.5) / 4294967296.0, u2 = (w.v[1] + 0.5) / 4294967296.0;
  return 0.02 * std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

TEST(DrafterInit, MatricesFollowTheFormulaInCanonicalOrderNormsAreOne) {
  const DrafterConfig c = tiny_config();
  MemoryTracker tracker;
  const std::uint64_t seed = 0xABCDEF0123ull;
  const DrafterParameters<double> p = seeded_drafter_parameters(tracker, c, seed);
  // Matrices: fc = 0; layer l's q, k, v, o, gate, up, down = 1 + 7 l ... 7 + 7 l.
  EXPECT_EQ(p.fc[5], box_muller_from_spec(seed, 0, 5));
  EXPECT_EQ(p.layers[0].q_proj[0], box_muller_from_spec(seed, 1, 0));
  EXPECT_EQ(p.layers[0].o_proj[17], box_muller_from_spec(seed, 4, 17));
  EXPECT_EQ(p.layers[1].k_proj[3], box_muller_from_spec(seed, 9, 3));
  EXPECT_EQ(p.layers[1].down_proj[100], box_muller_from_spec(seed, 14, 100));
  for (const Tensor<double>* norm :
       {&p.hidden_norm, &p.layers[0].q_norm, &p.layers[1].post_attention_layernorm, &p.norm}) {
    for (std::int64_t i = 0; i < norm->numel(); ++i) EXPECT_EQ((*norm)[i], 1.0);
  }
  // The draws are N(0, 0.02^2): over fc's 512 values the sample deviation is within 15%.
  double sum_sq = 0;
  for (std::int64_t i = 0; i < p.fc.numel(); ++i) sum_sq += p.fc[i] * p.fc[i];
  EXPECT_NEAR(std::sqrt(sum_sq / double(p.fc.numel())), 0.02, 0.003);
  // Another seed, other weights.
  EXPECT_NE(seeded_drafter_parameters(tracker, c, seed + 1).fc[5], p.fc[5]);
}

// A range of the flat vector, drawn for that range alone, is those elements of the whole: the
// whole built here from the formula over every parameter's shape in canonical order, the ranges
// starting and ending at every tensor boundary, one element either side of it, mid-tensor and past P
// (zeros: ZeRO-1's padding), on a config whose layers make many boundaries.
TEST(DrafterInit, AFlatRangeIsThoseElementsOfTheWholeDrawnForItAlone) {
  const DrafterConfig c = tiny_config();
  const std::uint64_t seed = 0x5EEDull;
  std::vector<double> whole;
  std::vector<std::int64_t> cuts{0};
  std::uint32_t matrix = 0;
  for (const ParameterShape& s : drafter_parameter_shapes(c)) {
    const std::int64_t n = shape_numel(s.shape);
    for (std::int64_t e = 0; e < n; ++e)
      whole.push_back(s.shape.size() == 1 ? 1.0 : box_muller_from_spec(seed, matrix, e));
    if (s.shape.size() != 1) ++matrix;
    const std::int64_t end = std::int64_t(whole.size());
    for (const std::int64_t cut : {end - 1, end, end + 1, end - n / 2}) cuts.push_back(cut);
  }
  const std::int64_t P = std::int64_t(whole.size());
  ASSERT_EQ(P, drafter_parameter_count(c));
  cuts.push_back(P + 7);
  std::vector<double> padded = whole;
  padded.resize(std::size_t(P + 7), 0.0);
  int ranges = 0;
  for (const std::int64_t a : cuts) {
    for (const std::int64_t b : cuts) {
      if (a < 0 || b < a || b > P + 7 || (b - a > 64 && a % 5 != 0)) continue;  // a bounded sample of long ranges
      std::vector<double> out(std::size_t(b - a), -1.0);
      seeded_flat_values(c, seed, a, out);
      ASSERT_EQ(out, std::vector<double>(padded.begin() + a, padded.begin() + b)) << "[" << a << ", " << b << ")";
      ++ranges;
    }
  }
  EXPECT_GT(ranges, 500);
  MemoryTracker tracker;
  std::vector<double> flat;
  seeded_drafter_parameters(tracker, c, seed).for_each([&](const std::string&, const Tensor<double>& t) {
    flat.insert(flat.end(), t.values().begin(), t.values().end());
  });
  EXPECT_EQ(flat, whole);
}

}  // namespace
}  // namespace dflash
