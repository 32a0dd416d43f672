// The CUDA training step's host-side layout (distributed/device_training_layout.hpp), on the CPU:
// the rank's owned range clipped to P, the AdamW decay table as the kernel reads it, the working
// copy's slots and the runs that refresh it, the conversion to and
// from the host OptimizerState; and the single-process communicator's in-place collectives, which
// the CUDA step calls on device pointers, never touching the buffer.
#include <sys/mman.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "cuda/optimizer/adamw_program.hpp"
#include "distributed/device_training_layout.hpp"
#include "distributed/single_process_communicator.hpp"
#include "tests/distributed/training_problem.hpp"

namespace dflash::testing {
namespace {

// P = 1056 (training_problem.hpp): no R 128 divides it, so every ZeRO-1 layout has padding.
TEST(DeviceTrainingLayout, OwnedRangesTileZeroToPAndStayInsideTheShards) {
  const DrafterConfig config = tiny_drafter_config();
  for (int zero = 0; zero <= 1; ++zero) {
    for (int R = 1; R <= 10; ++R) {
      SCOPED_TRACE("ZeRO-" + std::to_string(zero) + ", R = " + std::to_string(R));
      const FlatLayout layout(config, R, zero);
      std::int64_t next = 0;
      for (int r = 0; r < R; ++r) {
        const FlatRange owned = owned_range(layout, r);
        if (zero == 0) {
          EXPECT_EQ(owned, (FlatRange{0, layout.count()}));
          continue;
        }
        EXPECT_EQ(owned.begin, std::min(next, layout.count()));
        EXPECT_GE(owned.begin, std::min(layout.shard_offset(r), layout.count()));
        EXPECT_LE(owned.end, layout.count()) << "rank " << r << " would store padding";
        EXPECT_LE(owned.end, layout.shard_offset(r) + layout.shard_size());
        next = owned.end;
      }
      if (zero == 1) {
        EXPECT_EQ(next, layout.count());
      }
    }
  }
  // R = 1 under ZeRO-1: the shard is the padded vector (1152), the owned part only P.
  EXPECT_EQ(owned_range(FlatLayout(config, 1, 1), 0), (FlatRange{0, 1056}));
  // R = 10: s = 128; rank 8 owns [1024, 1056), rank 9 nothing (its shard is all padding).
  const FlatLayout ten(config, 10, 1);
  EXPECT_EQ(owned_range(ten, 8), (FlatRange{1024, 1056}));
  EXPECT_EQ(owned_range(ten, 9).size(), 0);
  EXPECT_THROW(owned_range(ten, 10), InputError);
}

// Independently of FlatLayout's flag: the projection matrices and fc decay, anything named *norm* never.
bool decays_by_name(const std::string& name) { return name.find("norm") == std::string::npos; }

TEST(DeviceTrainingLayout, DecayTableDecaysMatricesAndNeverNormWeights) {
  const FlatLayout layout(tiny_drafter_config(), 3, 1);
  const HostDecayTable host = decay_table(layout);
  const DecayTable table{host.ends.data(), host.decay.data(), int(host.ends.size())};
  int decayed = 0, plain = 0;
  for (const FlatTensor& t : layout.tensors()) {
    for (std::int64_t e = t.offset; e < t.offset + t.numel; ++e) {
      ASSERT_EQ(decays_at(table, e), decays_by_name(t.name)) << t.name << " flat element " << e;
    }
    ++(decays_by_name(t.name) ? decayed : plain);
  }
  EXPECT_EQ(decayed, 1 + 2 * 7);    // fc, and per layer q, k, v, o, gate, up, down
  EXPECT_EQ(plain, 1 + 2 * 4 + 1);  // hidden_norm, per layer 4 norms, norm
  EXPECT_FALSE(decays_at(table, layout.count())) << "the padding";
}

TEST(DeviceTrainingLayout, WorkingCopyRunsRefreshExactlyTheRangeIntoEachTensorsSlot) {
  const FlatLayout layout(tiny_drafter_config(), 4, 1);
  const WorkingLayout working = working_layout(layout);
  EXPECT_EQ(working.matrix_elements + working.vector_elements, layout.count());
  // The slots of each buffer follow each other without gaps or overlap, in canonical order.
  std::int64_t filled[2] = {0, 0};
  for (std::size_t t = 0; t < layout.tensors().size(); ++t) {
    const FlatTensor& ft = layout.tensors()[t];
    EXPECT_EQ(working.slots[t].matrix, ft.shape.size() == 2) << ft.name;
    EXPECT_EQ(working.slots[t].offset, filled[working.slots[t].matrix]) << ft.name;
    filled[working.slots[t].matrix] += ft.numel;
  }
  // Ranges that start and end inside tensors, span several, and reach into the padding.
  const std::int64_t P = layout.count();
  for (const auto& [begin, n] : {std::pair<std::int64_t, std::int64_t>{0, P},
                                 {5, 300},
                                 {700, 400},
                                 {P - 3, 200},
                                 {layout.padded() - 128, 128}}) {
    SCOPED_TRACE("range [" + std::to_string(begin) + ", +" + std::to_string(n) + ")");
    std::vector<double> values(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) values[std::size_t(i)] = begin + i < P ? double(begin + i) : std::nan("");
    std::vector<double> matrices(std::size_t(working.matrix_elements), -1),
        vectors(std::size_t(working.vector_elements), -1);
    for (const WorkingCopyRun& r : working_copy_runs(layout, working, begin, n)) {
      std::vector<double>& to = r.matrix ? matrices : vectors;
      for (std::int64_t i = 0; i < r.length; ++i)
        to.at(std::size_t(r.target + i)) = values.at(std::size_t(r.source + i));
    }
    for (std::size_t t = 0; t < layout.tensors().size(); ++t) {
      const FlatTensor& ft = layout.tensors()[t];
      const std::vector<double>& in = working.slots[t].matrix ? matrices : vectors;
      for (std::int64_t j = 0; j < ft.numel; ++j) {
        const std::int64_t e = ft.offset + j;
        const double want = e >= begin && e < begin + n ? double(e) : -1.0;
        ASSERT_EQ(in[std::size_t(working.slots[t].offset + j)], want) << ft.name << " element " << j;
      }
    }
  }
}

TEST(DeviceTrainingLayout, OptimizerStateRoundTripsThroughTheDevicePart) {
  const FlatLayout layout(tiny_drafter_config(), 3, 1);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<double> full[3];
  for (auto& v : full) {
    v.resize(std::size_t(layout.count()));
    for (double& x : v) x = double(u(rng));  // fp32 values: the round trip is exact
  }
  MemoryTracker tracker;
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const OptimizerState host = restore_optimizer_state(tracker, layout, r, full[0], full[1], full[2], 7);
    const DeviceOptimizerPart part = device_optimizer_part(layout, r, host);
    EXPECT_EQ(std::int64_t(part.master.size()), owned_range(layout, r).size());
    EXPECT_EQ(part.step, 7);
    const OptimizerState back = host_optimizer_state(tracker, layout, r, part);
    EXPECT_EQ(back.step, 7);
    EXPECT_EQ(back.offset, host.offset);
    EXPECT_EQ(back.master.values(), host.master.values());
    EXPECT_EQ(back.exp_avg.values(), host.exp_avg.values());
    EXPECT_EQ(back.exp_avg_sq.values(), host.exp_avg_sq.values());
  }
  MemoryTracker t2;
  const OptimizerState host = restore_optimizer_state(t2, layout, 1, full[0], full[1], full[2], 0);
  // From a slice of the vectors that holds the rank's part (a checkpoint read for that rank): the
  // same state; a slice that misses one of the part's values is refused, naming the vector.
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " from its slice");
    const OptimizerState whole = restore_optimizer_state(t2, layout, r, full[0], full[1], full[2], 5);
    const std::int64_t first = std::max<std::int64_t>(0, layout.shard_offset(r) - 3),
                       end = std::min(layout.count(), layout.shard_offset(r) + layout.shard_size() + 2);
    const auto slice = [&](const std::vector<double>& v, std::int64_t b, std::int64_t e) {
      return std::vector<double>(v.begin() + b, v.begin() + e);
    };
    const OptimizerState part = restore_optimizer_part(t2, layout, r, first, slice(full[0], first, end),
                                                       slice(full[1], first, end), slice(full[2], first, end), 5);
    EXPECT_EQ(part.offset, whole.offset);
    EXPECT_EQ(part.step, 5);
    EXPECT_EQ(part.master.values(), whole.master.values());
    EXPECT_EQ(part.exp_avg.values(), whole.exp_avg.values());
    EXPECT_EQ(part.exp_avg_sq.values(), whole.exp_avg_sq.values());
    const std::int64_t part_end = std::min(layout.count(), layout.shard_offset(r) + layout.shard_size());
    try {
      restore_optimizer_part(t2, layout, r, first, slice(full[0], first, end), slice(full[1], first, part_end - 1),
                             slice(full[2], first, end), 5);
      ADD_FAILURE() << "a slice one value short of the part was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("exp_avg"), std::string::npos) << e.what();
    }
    const std::int64_t late = layout.shard_offset(r) + 1;  // starts one value after the part
    try {
      restore_optimizer_part(t2, layout, r, late, slice(full[0], late, end), slice(full[1], late, end),
                             slice(full[2], late, end), 5);
      ADD_FAILURE() << "a slice that starts after the part was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("master weights"), std::string::npos) << e.what();
    }
  }
  // On enough ranks the last shard lies wholly in ZeRO-1's padding: its slice is empty, at P, and
  // the part is all zeros, as from the whole vectors.
  int ranks = 2;
  while (FlatLayout(tiny_drafter_config(), ranks, 1).shard_offset(ranks - 1) < layout.count()) ++ranks;
  const FlatLayout padded(tiny_drafter_config(), ranks, 1);
  const OptimizerState from_whole = restore_optimizer_state(t2, padded, ranks - 1, full[0], full[1], full[2], 2);
  const std::vector<double> none;
  const OptimizerState from_none = restore_optimizer_part(t2, padded, ranks - 1, padded.count(), none, none, none, 2);
  EXPECT_EQ(from_none.offset, from_whole.offset);
  EXPECT_EQ(from_none.master.values(), from_whole.master.values());
  EXPECT_EQ(from_none.exp_avg_sq.values(), std::vector<double>(std::size_t(padded.shard_size()), 0.0));
  DeviceOptimizerPart wrong = device_optimizer_part(layout, 1, host);
  wrong.exp_avg.pop_back();
  try {
    host_optimizer_state(t2, layout, 1, wrong);
    ADD_FAILURE() << "a short exp_avg was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("exp_avg"), std::string::npos) << e.what();
  }
}

// The CUDA step runs the single-process communicator's collectives in place on device memory:
// they must not read or write the buffer. A page the process may not touch stands in for it.
TEST(SingleProcessCommunicator, InPlaceCollectivesNeverTouchTheBuffer) {
  const std::size_t page = 4096;
  void* p = ::mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  SingleProcessCommunicator comm;
  comm.all_reduce(p, p, 256, CommType::f32, CommOp::sum);
  comm.reduce_scatter(p, p, 256, CommType::f32, CommOp::sum);
  comm.all_gather(p, p, 256, CommType::f32);
  comm.broadcast(p, 256, CommType::f32, 0);
  ::munmap(p, page);
}

}  // namespace
}  // namespace dflash::testing
