// TRAINING §11: sequence g runs at micro-step u = g / (R b) on rank r = (g mod R b) / b.
#include <string>

#include <gtest/gtest.h>

#include "distributed/flat_parameters.hpp"
#include "distributed/global_batch.hpp"
#include "io/errors.hpp"
#include "tests/distributed/training_problem.hpp"

namespace dflash {
namespace {

TEST(GlobalBatch, SlotsFollowTheFormulaAndEveryRankGetsItsShare) {
  const GlobalBatchLayout layout(24, 4, 2);  // b = 3
  EXPECT_EQ(layout.per_rank_micro_step(), 3);
  for (std::int64_t g = 0; g < 24; ++g) {
    EXPECT_EQ(layout.slot_of(g).micro_step, g / 12);
    EXPECT_EQ(layout.slot_of(g).rank, (g % 12) / 3);
  }
  EXPECT_EQ(layout.sequences_of_rank(1), (std::vector<std::int64_t>{3, 4, 5, 15, 16, 17}));
  std::vector<int> seen(24, 0);
  for (int r = 0; r < 4; ++r) {
    for (std::int64_t g : layout.sequences_of_rank(r)) {
      ++seen[static_cast<std::size_t>(g)];
      EXPECT_EQ(layout.slot_of(g).rank, r);
    }
  }
  for (int n : seen) EXPECT_EQ(n, 1);
}

TEST(GlobalBatch, AGlobalBatchThatRTimesUDoesNotDivideIsRefusedNamingTheThreeNumbers) {
  try {
    GlobalBatchLayout(10, 3, 2);
    FAIL() << "accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    for (const char* part : {"global_batch_sequences = 10", "3 ranks", "2 micro_steps"}) {
      EXPECT_NE(what.find(part), std::string::npos) << what;
    }
  }
  EXPECT_THROW(GlobalBatchLayout(6, 2, 2), InputError);  // R divides it, R U does not: 2 sequences left over
  EXPECT_THROW(GlobalBatchLayout(8, 0, 1), InputError);
  EXPECT_THROW(GlobalBatchLayout(8, 2, 0), InputError);
  EXPECT_THROW(GlobalBatchLayout(8, 2, 1).slot_of(8), InputError);
  EXPECT_THROW(GlobalBatchLayout(8, 2, 1).sequences_of_rank(2), InputError);
}

TEST(FlatLayout, CanonicalOrderPaddingAndShards) {
  const DrafterConfig config = testing::tiny_drafter_config();
  const FlatLayout zero0(config, 3, 0), zero1(config, 3, 1);
  const std::int64_t P = drafter_parameter_count(config);
  EXPECT_EQ(zero0.count(), P);
  EXPECT_EQ(zero0.padded(), P);
  EXPECT_EQ(zero0.shard_size(), P);
  EXPECT_EQ(zero1.padded() % (3 * 128), 0);
  EXPECT_LT(zero1.padded() - P, 3 * 128);
  EXPECT_GT(zero1.padded(), P);
  EXPECT_EQ(zero1.shard_size() * 3, zero1.padded());
  EXPECT_EQ(zero1.shard_offset(2), 2 * zero1.shard_size());
  EXPECT_EQ(zero1.tensors().front().name, "fc.weight");
  EXPECT_EQ(zero1.tensors().back().name, "norm.weight");
  EXPECT_EQ(zero1.tensors()[2].name, "layers.0.input_layernorm.weight");
  for (const FlatTensor& t : zero1.tensors()) {
    EXPECT_EQ(t.decay, t.shape.size() == 2) << t.name;  // matrices decay, norm weights never
    EXPECT_EQ(zero1.tensor_at(t.offset), static_cast<std::size_t>(&t - zero1.tensors().data()));
  }
}

TEST(FlatLayout, ReadAndWriteCrossTensorBoundariesAndReadZeroPadding) {
  const DrafterConfig config = testing::tiny_drafter_config();
  const FlatLayout layout(config, 4, 1);
  MemoryTracker tracker;
  DrafterParameters<double> p = init_drafter_parameters<double>(tracker, config, 9, 0.3);
  std::vector<double> all(static_cast<std::size_t>(layout.padded()));
  read_flat(layout, p, 0, all);
  std::int64_t e = 0;
  p.for_each([&](const std::string& name, const Tensor<double>& t) {
    for (std::int64_t i = 0; i < t.numel(); ++i, ++e) ASSERT_EQ(all[static_cast<std::size_t>(e)], t[i]) << name;
  });
  for (std::int64_t i = layout.count(); i < layout.padded(); ++i) EXPECT_EQ(all[static_cast<std::size_t>(i)], 0.0);
  // Write a window spanning fc.weight's end and the next tensors, and past P (dropped).
  std::vector<double> window(300);
  for (std::size_t i = 0; i < window.size(); ++i) window[i] = double(i) + 0.5;
  write_flat(layout, p, 100, window);
  write_flat(layout, p, layout.count() - 5, window);
  std::vector<double> back(300);
  read_flat(layout, p, 100, back);
  EXPECT_EQ(back, window);
  read_flat(layout, p, layout.count() - 5, back);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(back[i], window[i]);
  for (std::size_t i = 5; i < back.size(); ++i) EXPECT_EQ(back[i], 0.0);
}

}  // namespace
}  // namespace dflash
