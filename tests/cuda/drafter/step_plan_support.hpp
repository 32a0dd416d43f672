// A drafter step's memory against `dflash plan`, for the CPU backends' test
// (test_drafter_sequence_step_cpu.cpp) and the device's (test_drafter_step_gpu.cpp): the plan
// request of the step's shapes at production precision, one GPU, ZeRO-0 (the step holds no
// optimizer state), dL/dF handed back; and the peaks held to it.
#pragma once

#include <cstdint>

#include <gtest/gtest.h>

#include "planner/training_plan.hpp"
#include "reference/drafter.hpp"
#include "reference/memory_tracker.hpp"

namespace dflash {

inline CategoryBytes step_plan(const DrafterConfig& config, const DrafterBatch<double>& batch,
                               const DrafterStepOptions& o) {
  PlanRequest r = PlanRequest::from_config(config);
  r.tokens = batch.anchor_slots(config) * config.block_size;
  r.context = batch.context_length();
  r.sequences = batch.num_sequences();
  r.loss_policy = o.loss_policy;
  r.loss_chunk_rows = o.loss_chunk_rows;
  r.trunk_policy = o.trunk_policy;
  r.checkpoint_every = o.checkpoint_every;
  r.layout = {.gpus = 1, .zero_stage = 0};
  r.features_grad = true;  // the step hands dL/dF back
  return plan_training_memory(r).categories;
}

// Every category's peak exactly as planned but transient's, which lies between the plan and the
// plan plus `transient_extra` (what the backend holds that the plan does not list).
inline void expect_peaks_as_planned(const MemoryTracker& t, const CategoryBytes& plan, std::int64_t transient_extra) {
  const auto peak = [&](MemoryCategory m) { return static_cast<std::int64_t>(t.peak(m)); };
  EXPECT_EQ(peak(MemoryCategory::parameters), plan[PlanCategory::parameters]);
  EXPECT_EQ(peak(MemoryCategory::frozen), plan[PlanCategory::frozen]);
  EXPECT_EQ(peak(MemoryCategory::gradients), plan[PlanCategory::gradients]);
  EXPECT_EQ(peak(MemoryCategory::inputs), plan[PlanCategory::inputs]);
  EXPECT_EQ(peak(MemoryCategory::saved), plan[PlanCategory::saved]);
  EXPECT_EQ(peak(MemoryCategory::loss_saved), plan[PlanCategory::loss_saved]);
  EXPECT_EQ(peak(MemoryCategory::outputs), plan[PlanCategory::outputs]);
  EXPECT_GE(peak(MemoryCategory::transient), plan[PlanCategory::transient]);
  EXPECT_LE(peak(MemoryCategory::transient), plan[PlanCategory::transient] + transient_extra);
}

}  // namespace dflash
