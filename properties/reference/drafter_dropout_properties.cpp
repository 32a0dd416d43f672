// Dropout statistics and coordinates (SPEC §6): the kept fraction is 1 - p within 4 standard
// deviations, and a mask changes with each of seed, step, sequence, layer and site.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/reference/drafter_cases.hpp"
#include "reference/dropout.hpp"

namespace dflash {
namespace {

bool within_four_sigma(std::size_t kept, std::size_t n, double p) {
  const double fraction = double(kept) / double(n);
  const double sigma = std::sqrt(p * (1 - p) / double(n));
  return std::abs(fraction - (1 - p)) <= 4 * sigma;
}

DropoutCoordinates gen_coordinates() {
  DropoutCoordinates at;
  at.seed = *rc::gen::arbitrary<std::uint64_t>();
  at.step = *rc::gen::arbitrary<std::uint32_t>();
  at.sequence = *rc::gen::inRange<std::uint32_t>(0, kMaxSequenceIndex);
  return at;
}

std::vector<bool> mask_bits(const DropoutCoordinates& at, std::uint32_t layer, DropoutSite site, double p,
                            std::uint64_t first, std::size_t n) {
  const DropoutSiteMask<double> mask(at, layer, site, p);
  std::vector<bool> bits(n);
  for (std::size_t e = 0; e < n; ++e) bits[e] = mask.factor(first + e) != 0.0;
  return bits;
}

RC_GTEST_PROP(DrafterDropout, KeptFractionIsOneMinusPWithinFourSigma, ()) {
  const DropoutCoordinates at = gen_coordinates();
  const double p = *rc::gen::inRange(1, 100) / 100.0;
  const auto layer = *rc::gen::inRange<std::uint32_t>(0, 255);
  const auto site =
      *rc::gen::element(DropoutSite::attention_probs, DropoutSite::attention_residual, DropoutSite::mlp_residual);
  const std::uint64_t first = *rc::gen::arbitrary<std::uint32_t>() * std::uint64_t(64);
  const std::size_t n = 20000;
  const std::vector<bool> bits = mask_bits(at, layer, site, p, first, n);
  const auto kept = static_cast<std::size_t>(std::count(bits.begin(), bits.end(), true));
  RC_LOG() << "p " << p << ": kept " << kept << " of " << n << "\n";
  RC_ASSERT(within_four_sigma(kept, n, p));
}

RC_GTEST_PROP(DrafterDropout, MaskChangesWithSeedStepSequenceLayerAndSite, ()) {
  const DropoutCoordinates at = gen_coordinates();
  const double p = *rc::gen::inRange(20, 81) / 100.0;
  const auto layer = *rc::gen::inRange<std::uint32_t>(0, 254);
  const std::uint64_t first = *rc::gen::arbitrary<std::uint32_t>();
  const std::size_t n = 256;  // equal by chance with probability <= 0.68^256
  const std::vector<bool> base = mask_bits(at, layer, DropoutSite::attention_residual, p, first, n);
  DropoutCoordinates other = at;
  other.seed = at.seed ^ (std::uint64_t(1) << *rc::gen::inRange(0, 64));
  RC_ASSERT(mask_bits(other, layer, DropoutSite::attention_residual, p, first, n) != base);
  other = at;
  other.step = at.step + 1;
  RC_ASSERT(mask_bits(other, layer, DropoutSite::attention_residual, p, first, n) != base);
  other = at;
  other.sequence = (at.sequence + 1) % kMaxSequenceIndex;
  RC_ASSERT(mask_bits(other, layer, DropoutSite::attention_residual, p, first, n) != base);
  RC_ASSERT(mask_bits(at, layer + 1, DropoutSite::attention_residual, p, first, n) != base);
  RC_ASSERT(mask_bits(at, layer, DropoutSite::mlp_residual, p, first, n) != base);
  RC_ASSERT(mask_bits(at, layer, DropoutSite::attention_probs, p, first, n) != base);
}

// Through the step: each site draws with its own probability (attention_dropout at site 1,
// hidden_dropout at sites 2 and 3), and the masks of different sequences, layers and sites differ.
TEST(DrafterDropout, TheStepDrawsEachSiteWithItsProbabilityAndCoordinates) {
  MemoryTracker tracker;
  DrafterConfig config = load_drafter_config(std::filesystem::path(DFLASH_SOURCE_DIR) / "configs" / "tiny.json");
  config.attention_dropout = 0.3;
  config.hidden_dropout = 0.15;
  const auto params = init_drafter_parameters<double>(tracker, config, 3);
  const auto frozen = init_frozen_weights<double>(tracker, config, 4);
  const auto batch = make_drafter_batch<double>(tracker, config, {.sequences = 2, .context_length = 24, .seed = 9});
  std::map<std::tuple<std::uint32_t, std::uint32_t, DropoutSite>, std::map<std::uint64_t, bool>> masks;
  const DropoutObserver observer = [&](const DropoutDraw& d) {
    if (d.pass == DropoutPass::forward) masks[{d.sequence, d.layer, d.site}][d.element] = d.kept;
  };
  DrafterStepOptions options = drafter_step_options(config, 17, 40);
  options.dropout_observer = &observer;
  drafter_step(tracker, config, params, frozen, batch, options);

  ASSERT_EQ(masks.size(), 2u * 2u * 3u);  // sequences x layers x sites
  for (const auto& [key, mask] : masks) {
    const double p = std::get<2>(key) == DropoutSite::attention_probs ? 0.3 : 0.15;
    std::size_t kept = 0;
    for (const auto& [e, k] : mask) kept += k;
    EXPECT_TRUE(within_four_sigma(kept, mask.size(), p)) << kept << " of " << mask.size() << " kept at p " << p;
  }
  auto differ = [&](const std::map<std::uint64_t, bool>& a, const std::map<std::uint64_t, bool>& b) {
    std::size_t common = 0, different = 0;
    for (const auto& [e, k] : a) {
      const auto it = b.find(e);
      if (it == b.end()) continue;
      ++common;
      different += it->second != k;
    }
    return common > 0 && different > 0;
  };
  const auto site2 = DropoutSite::attention_residual, site3 = DropoutSite::mlp_residual;
  EXPECT_TRUE(differ(masks[{40, 0, site2}], masks[{41, 0, site2}]));  // sequence
  EXPECT_TRUE(differ(masks[{40, 0, site2}], masks[{40, 1, site2}]));  // layer
  EXPECT_TRUE(differ(masks[{40, 0, site2}], masks[{40, 0, site3}]));  // site
}

}  // namespace
}  // namespace dflash
