// The committed goldens (golden/data) against the code: regenerated, every case must match its
// committed file within 1e-13 (metadata and integer tensors identical), so the reference cannot
// drift silently. A deliberate change regenerates them (`dflash golden generate --out
// golden/data`) and commits them in the same commit, with the reason in its message.
// Also: the stored anchors are SPEC §4's sampler, each case has the property golden/README.md
// says it exercises, every policy reproduces every golden, and all of them stay under 2 MB.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/tolerances.hpp"
#include "golden/check.hpp"
#include "tests/golden/golden_test_support.hpp"

namespace dflash {
namespace {

using golden_testing::committed_golden;
using golden_testing::ScratchDirectory;

TEST(GoldenRegenerate, EveryCaseMatchesItsCommittedFile) {
  ScratchDirectory dir;
  for (const GoldenCase& c : golden_cases()) {
    const std::filesystem::path fresh = dir / golden_file_name(c.name);
    write_golden(generate_golden(c), fresh);
    const Golden committed = read_golden(committed_golden(c.name));
    const Golden regenerated = read_golden(fresh);
    int failed = 0;
    for (const GoldenCheckRow& r : compare_goldens(committed, regenerated, kGoldenRegenerateTolerance)) {
      if (r.passed()) continue;
      ++failed;
      ADD_FAILURE() << c.name << ": " << r.tensor << " differs from " << committed_golden(c.name).string()
                    << " (rel err " << r.error << " > " << r.tolerance << ") " << r.note;
    }
    if (failed > 0) {
      ADD_FAILURE() << c.name << ": " << failed << " tensors drifted. If the reference or the golden data changed on "
                    << "purpose, regenerate with `dflash golden generate --out golden/data` and commit the files "
                    << "with the reason in the same commit.";
    }
  }
}

TEST(GoldenRegenerate, CommittedDirectoryHoldsExactlyTheCases) {
  std::vector<std::string> files, expected;
  for (const auto& entry : std::filesystem::directory_iterator(default_golden_dir())) {
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path().filename().string());
  }
  for (const GoldenCase& c : golden_cases()) expected.push_back(golden_file_name(c.name));
  std::sort(files.begin(), files.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files, expected);
}

TEST(GoldenRegenerate, AllGoldensTogetherStayUnderTwoMegabytes) {
  std::uintmax_t total = 0;
  for (const GoldenCase& c : golden_cases()) total += std::filesystem::file_size(committed_golden(c.name));
  EXPECT_LT(total, 2'000'000u);
}

TEST(GoldenRegenerate, StoredAnchorsAreTheSpecSamplersForTheSeedAndStep) {
  for (const GoldenCase& c : golden_cases()) {
    const Golden g = read_golden(committed_golden(c.name));
    for (std::int64_t b = 0; b < g.num_sequences(); ++b) {
      const AnchorSlots sampled = sample_anchors(g.batch.sequence_loss_mask(b), g.config.max_anchors, g.config.seed,
                                                 g.step, static_cast<std::uint32_t>(b));
      const auto N = static_cast<std::size_t>(g.anchor_slots());
      EXPECT_EQ(sampled.anchors, std::vector<std::int64_t>(g.batch.anchors->row(b), g.batch.anchors->row(b) + N))
          << c.name << " sequence " << b;
      EXPECT_EQ(sampled.keep, std::vector<std::uint8_t>(g.batch.keep->row(b), g.batch.keep->row(b) + N))
          << c.name << " sequence " << b;
    }
  }
}

TEST(GoldenRegenerate, EveryTrunkAndLossPolicyReproducesEveryGolden) {
  for (const GoldenCase& c : golden_cases()) {
    Golden g = read_golden(committed_golden(c.name));
    for (TrunkPolicy trunk : {TrunkPolicy::none, TrunkPolicy::per_layer, TrunkPolicy::every_k}) {
      for (LossPolicy loss : kAllLossPolicies) {
        g.config.trunk_policy = trunk;
        g.config.checkpoint_every = trunk == TrunkPolicy::every_k ? 2 : 1;
        g.config.loss_policy = loss;
        g.config.loss_chunk_rows = 3;
        for (const GoldenCheckRow& r : check_golden(g, reference_golden_implementation())) {
          EXPECT_TRUE(r.passed()) << c.name << " " << trunk_policy_name(trunk) << "/" << loss_policy_name(loss) << ": "
                                  << r.tensor << " " << r.error << " " << r.note;
        }
      }
    }
  }
}

// ---- each case exercises what golden/README.md says it does -----------------------------------

struct BlockFacts {
  bool invalid_block = false;            // a slot with kappa = 0
  bool all_invalid_sequence = false;     // a sequence with every slot kappa = 0
  bool partly_invalid_sequence = false;  // kept and invalid slots in one sequence
  bool hole_inside_block = false;        // a kept block row k >= 1 inside S with m = 0
  bool runs_past_end = false;            // a kept block with rows at a_n + k >= S
  bool window_cuts_context = false;      // a kept anchor beyond the sliding window
  bool decayed_weight = false;           // a weight strictly between 0 and 1
};

BlockFacts block_facts(const Golden& g) {
  BlockFacts f;
  const std::int64_t S = g.context_length(), N = g.anchor_slots(), B = g.config.block_size;
  for (std::int64_t b = 0; b < g.num_sequences(); ++b) {
    const std::int64_t* a = g.batch.anchors->row(b);
    const std::uint8_t* keep = g.batch.keep->row(b);
    const std::uint8_t* m = g.batch.loss_mask.row(b);
    const auto kept = std::count(keep, keep + N, std::uint8_t{1});
    f.invalid_block = f.invalid_block || kept < N;
    f.all_invalid_sequence = f.all_invalid_sequence || kept == 0;
    f.partly_invalid_sequence = f.partly_invalid_sequence || (kept > 0 && kept < N);
    for (std::int64_t n = 0; n < N; ++n) {
      if (keep[n] == 0) continue;
      f.runs_past_end = f.runs_past_end || a[n] + B - 1 >= S;
      f.window_cuts_context = f.window_cuts_context || (g.config.sliding_window && a[n] >= *g.config.sliding_window);
      for (std::int64_t k = 1; k < B && a[n] + k < S; ++k)
        f.hole_inside_block = f.hole_inside_block || m[a[n] + k] == 0;
    }
  }
  for (double w : g.results.at("output/weights").values) f.decayed_weight = f.decayed_weight || (w > 0 && w < 1);
  return f;
}

Golden committed(const std::string& name) { return read_golden(committed_golden(name)); }

TEST(GoldenCaseProperties, TinyFullIsFullAttentionWithoutDropoutTemperatureOrDecay) {
  const Golden g = committed("tiny-full");
  EXPECT_FALSE(g.config.has_sliding_layer());
  EXPECT_EQ(g.config.num_attention_heads, g.config.num_key_value_heads);
  EXPECT_EQ(g.config.attention_dropout + g.config.hidden_dropout, 0.0);
  EXPECT_EQ(g.config.temperature, 1.0);
  EXPECT_FALSE(g.config.loss_decay_gamma.has_value());
  EXPECT_FALSE(block_facts(g).invalid_block);
}

TEST(GoldenCaseProperties, GqaSlidingGroupsHeadsAndItsWindowCutsTheContext) {
  const Golden g = committed("gqa-sliding");
  EXPECT_GT(g.config.heads_per_kv_head(), 1);
  EXPECT_GT(g.config.num_key_value_heads, 1);
  EXPECT_NE(g.config.query_width(), g.config.hidden_size);
  EXPECT_TRUE(g.config.has_sliding_layer());
  EXPECT_TRUE(block_facts(g).window_cuts_context);
}

TEST(GoldenCaseProperties, DropoutIsOnAtBothSitesAndChangesTheResult) {
  Golden g = committed("dropout");
  EXPECT_GT(g.config.attention_dropout, 0.0);
  EXPECT_GT(g.config.hidden_dropout, 0.0);
  EXPECT_GT(g.config.seed >> 32, 0u);  // the key's high word is exercised
  EXPECT_GT(g.step, 0u);
  g.config.attention_dropout = 0;
  g.config.hidden_dropout = 0;
  MemoryTracker tracker;
  const GoldenOutputs without = reference_golden_implementation().compute(tracker, g);
  EXPECT_NE(golden_scalar(without.tensors, "output/loss"), golden_scalar(g.results, "output/loss"));
}

TEST(GoldenCaseProperties, TemperatureDecayHasTauNotOneAndDecayedWeights) {
  const Golden g = committed("temperature-decay");
  EXPECT_NE(g.config.temperature, 1.0);
  ASSERT_TRUE(g.config.loss_decay_gamma.has_value());
  EXPECT_TRUE(block_facts(g).decayed_weight);
  EXPECT_NE(g.config.hard_weight + g.config.soft_weight, 0.0);
}

TEST(GoldenCaseProperties, HolesInvalidHasHolesInsideBlocksAndInvalidBlocks) {
  const Golden g = committed("holes-invalid");
  const BlockFacts f = block_facts(g);
  EXPECT_GE(g.num_sequences(), 3);
  EXPECT_TRUE(f.hole_inside_block);
  EXPECT_TRUE(f.all_invalid_sequence);
  EXPECT_TRUE(f.partly_invalid_sequence);
  EXPECT_GT(golden_scalar(g.results, "output/weight_sum"), 0.0);
}

TEST(GoldenCaseProperties, ShortContextHasBlockRowsPastTheSequenceEnd) {
  const Golden g = committed("short-context");
  EXPECT_TRUE(block_facts(g).runs_past_end);
}

}  // namespace
}  // namespace dflash
