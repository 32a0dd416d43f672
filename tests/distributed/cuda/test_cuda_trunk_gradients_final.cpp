// The CUDA trunk's announcements of final gradients (cuda/trunk/stack.hpp's GradientsFinal, what the
// CUDA step's bucket reduction issues collectives on), with the trunk's code on the CPU backend
// (harness/cuda/host_backend.hpp), the tiny config per layer and the mid one every 2 layers: the
// positions are the reference trunk's, in its order (gradients_final_positions: norm.weight,
// layers L-1 ... 0, then 0 for hidden_norm and fc), and at each announcement every gradient from
// that position on already holds its final bits (an announcement made before the layer's weight
// gradients are written, or a position off by one layer, fails).
#include <gtest/gtest.h>

#include <string>

#include "distributed/gradient_reduction.hpp"
#include "harness/cuda/host_backend.hpp"
#include "tests/cuda/trunk/twin_support.hpp"

namespace dflash {
namespace {

struct AnnouncementCase {
  TrunkCase trunk;
  TrunkPolicy policy;
  std::int64_t every;
};

class CudaTrunkGradientsFinal : public ::testing::TestWithParam<AnnouncementCase> {};
INSTANTIATE_TEST_SUITE_P(Configs, CudaTrunkGradientsFinal,
                         ::testing::Values(AnnouncementCase{{"tiny.json", 11, 4}, TrunkPolicy::per_layer, 1},
                                           AnnouncementCase{{"mid.json", 300, 4}, TrunkPolicy::every_k, 2}),
                         [](const auto& info) {
                           return std::string(info.param.trunk.config).substr(0, 3) +
                                  (info.param.policy == TrunkPolicy::every_k ? "_every2" : "");
                         });

TEST_P(CudaTrunkGradientsFinal, AnnouncesTheReferencePositionsOnceTheirGradientsAreFinal) {
  const AnnouncementCase& c = GetParam();
  TrunkProblem p(c.trunk);
  MemoryTracker tracker;
  std::vector<TrunkAnnouncement> announcements;
  const TrunkValues<float> final = run_trunk(HostBackend<float>{tracker}, p, c.policy, c.every, &announcements);
  const std::vector<std::size_t> expected = gradients_final_positions(p.config.num_hidden_layers);
  ASSERT_EQ(announcements.size(), expected.size());
  for (std::size_t j = 0; j < announcements.size(); ++j) {
    const TrunkAnnouncement& a = announcements[j];
    EXPECT_EQ(a.first, expected[j]) << "announcement " << j;
    ASSERT_EQ(a.grads.size(), final.grads.size());
    for (std::size_t t = a.first; t < final.grads.size(); ++t) {
      EXPECT_EQ(a.grads[t], final.grads[t])
          << "announcement " << j << " (from " << a.first << "): gradient " << t << " not final yet";
    }
  }
  // Each announcement finishes something: the group it adds was not final at the one before
  // (the gradients start at 0 and every tensor of the tiny and mid problems gets a non-zero one).
  for (std::size_t j = 1; j < announcements.size(); ++j) {
    const std::size_t group = announcements[j].first;
    EXPECT_NE(announcements[j - 1].grads[group], final.grads[group]) << "announcement " << j << " came late";
  }
}

}  // namespace
}  // namespace dflash
