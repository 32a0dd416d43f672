// The gradient buckets' issue schedule (distributed/gradient_reduction.hpp), which the reference
// step and the CUDA step both follow: for the tiny, mid and full configs, R = 2 and 8, ZeRO-0 and
// ZeRO-1, buckets of 512 B, 64 KiB and 25 MiB in fp32 and double, every bucket is issued exactly
// once, only once every element of it (every shard's piece under ZeRO-1) is final, as early as
// that (not one announcement later), last bucket first; and the reference's GradientReduction
// issues them in that order, bucket by bucket.
#include <algorithm>
#include <numeric>
#include <string>

#include <gtest/gtest.h>

#include "distributed/gradient_reduction.hpp"
#include "reference/drafter_config.hpp"

namespace dflash {
namespace {

DrafterConfig config_file(const char* name) {
  return load_drafter_config(std::filesystem::path(DFLASH_SOURCE_DIR) / "configs" / name);
}

struct Case {
  const char* config;
  int ranks, zero;
  std::int64_t bucket_bytes, element_bytes;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* config : {"tiny.json", "mid.json", "qwen3.6-27b.json"}) {
    for (int ranks : {2, 8}) {
      for (int zero : {0, 1}) {
        for (std::int64_t bytes : {std::int64_t(512), std::int64_t(64) << 10, std::int64_t(25) << 20}) {
          // 512 B buckets of the full config are millions of buckets: the small configs cover them
          if (bytes == 512 && std::string(config) == "qwen3.6-27b.json") continue;
          for (std::int64_t element : {4, 8}) all.push_back({config, ranks, zero, bytes, element});
        }
      }
    }
  }
  return all;
}

TEST(BucketSchedule, EveryBucketOnceOnlyWhenFinalAsEarlyAsPossibleLastFirst) {
  for (const Case& c : cases()) {
    const DrafterConfig config = config_file(c.config);
    const FlatLayout layout(config, c.ranks, c.zero);
    const GradientBuckets buckets =
        gradient_buckets(layout.count(), layout.parallel_layout(c.bucket_bytes, 1), c.element_bytes);
    const std::vector<std::size_t> positions = gradients_final_positions(config.num_hidden_layers);
    const auto schedule = bucket_issue_schedule(layout, config.num_hidden_layers, buckets);
    const std::string where = std::string(c.config) + " R " + std::to_string(c.ranks) + " ZeRO-" +
                              std::to_string(c.zero) + " " + std::to_string(c.bucket_bytes) + " B x" +
                              std::to_string(c.element_bytes);
    ASSERT_EQ(schedule.size(), positions.size()) << where;
    ASSERT_EQ(positions.back(), 0u) << where;
    std::vector<std::int64_t> order;
    for (std::size_t j = 0; j < schedule.size(); ++j) {
      const std::int64_t final_from = layout.tensors()[positions[j]].offset;
      const std::int64_t before = j == 0 ? layout.count() : layout.tensors()[positions[j - 1]].offset;
      for (const std::int64_t k : schedule[j]) {
        // Every element of the bucket is final: each piece's flat range lies in [final_from, padded).
        const int pieces = c.zero == 1 ? c.ranks : 1;
        for (int r = 0; r < pieces; ++r) {
          EXPECT_GE(r * layout.shard_size() + buckets.first(k), final_from) << where << " bucket " << k;
        }
        // As early as possible: it was not complete at the announcement before.
        EXPECT_LT(buckets.first(k), before) << where << " bucket " << k << " waited an announcement";
        order.push_back(k);
      }
    }
    std::vector<std::int64_t> expected(static_cast<std::size_t>(buckets.count()));
    std::iota(expected.rbegin(), expected.rend(), 0);  // count - 1 down to 0, each once
    EXPECT_EQ(order, expected) << where;
  }
}

// A communicator of `ranks` ranks that moves nothing and records which bucket each collective
// carries: the accumulator holds each element's flat index, so a bucket's first sent value is
// first(k) (shard 0's piece comes first under ZeRO-1).
class BucketRecorder final : public Communicator {
 public:
  explicit BucketRecorder(int ranks) : ranks_(ranks) {}
  int rank() const override { return 0; }
  int size() const override { return ranks_; }
  std::string_view backend() const override { return "recorder"; }
  void all_reduce(const void* send, void*, std::size_t, CommType, CommOp) override { record(send); }
  void reduce_scatter(const void* send, void*, std::size_t, CommType, CommOp) override { record(send); }
  void all_gather(const void*, void*, std::size_t, CommType) override {}
  void broadcast(void*, std::size_t, CommType, int) override {}
  std::vector<std::int64_t> firsts;  // per collective, the first flat index it carried

 protected:
  void end_job(int) override {}

 private:
  void record(const void* send) { firsts.push_back(std::int64_t(*static_cast<const double*>(send))); }
  int ranks_;
};

TEST(BucketSchedule, TheReferenceIssuesBucketsInTheScheduleOrder) {
  for (const Case& c : cases()) {
    // a double accumulator of the config's P: the full config's is too big, the mid one's 512 B
    // buckets too many for a CPU test's seconds (the tiny config covers them)
    if (std::string(c.config) == "qwen3.6-27b.json" || c.element_bytes != 8) continue;
    if (std::string(c.config) == "mid.json" && c.bucket_bytes == 512) continue;
    const DrafterConfig config = config_file(c.config);
    const FlatLayout layout(config, c.ranks, c.zero);
    const GradientBuckets buckets = gradient_buckets(layout.count(), layout.parallel_layout(c.bucket_bytes, 1), 8);
    MemoryTracker tracker;
    DrafterParameters<double> grads = make_drafter_parameters<double>(tracker, config, MemoryCategory::gradients);
    std::vector<double> index(static_cast<std::size_t>(layout.count()));
    std::iota(index.begin(), index.end(), 0.0);
    write_flat(layout, grads, 0, index);
    Tensor<double> bucket(tracker, MemoryCategory::communication,
                          {bucket_elements(layout.count(), layout.parallel_layout(c.bucket_bytes, 1), 8)});
    BucketRecorder comm(c.ranks);
    GradientReduction reduction(comm, layout, buckets, grads, bucket);
    const std::vector<std::size_t> positions = gradients_final_positions(config.num_hidden_layers);
    const auto schedule = bucket_issue_schedule(layout, config.num_hidden_layers, buckets);
    std::vector<std::int64_t> expected;
    for (std::size_t j = 0; j < positions.size(); ++j) {
      reduction.gradients_final_from(positions[j]);
      for (const std::int64_t k : schedule[j]) expected.push_back(buckets.first(k));
      // after each announcement, exactly the schedule's buckets so far, in its order
      EXPECT_EQ(comm.firsts, expected) << c.config << " R " << c.ranks << " ZeRO-" << c.zero << " " << c.bucket_bytes;
    }
  }
}

}  // namespace
}  // namespace dflash
