#include <gtest/gtest.h>

#include "reference/memory_tracker.hpp"

namespace dflash {
namespace {

TEST(MemoryTracker, TracksCurrentAndPeakPerCategoryAndInTotal) {
  MemoryTracker t;
  t.allocate(MemoryCategory::saved, 100);
  t.allocate(MemoryCategory::transient, 50);
  t.release(MemoryCategory::transient, 50);
  t.allocate(MemoryCategory::transient, 30);
  EXPECT_EQ(t.current(MemoryCategory::saved), 100u);
  EXPECT_EQ(t.current(MemoryCategory::transient), 30u);
  EXPECT_EQ(t.peak(MemoryCategory::transient), 50u);
  EXPECT_EQ(t.current_total(), 130u);
  EXPECT_EQ(t.peak_total(), 150u);
  EXPECT_EQ(t.peak(MemoryCategory::gradients), 0u);
}

TEST(MemoryTracker, ResetPeaksRestartsFromCurrent) {
  MemoryTracker t;
  t.allocate(MemoryCategory::saved, 100);
  t.release(MemoryCategory::saved, 60);
  t.reset_peaks();
  EXPECT_EQ(t.peak(MemoryCategory::saved), 40u);
  EXPECT_EQ(t.peak_total(), 40u);
}

TEST(MemoryTracker, OverReleaseIsABookkeepingError) {
  MemoryTracker t;
  t.allocate(MemoryCategory::saved, 10);
  EXPECT_THROW(t.release(MemoryCategory::saved, 11), std::logic_error);
  EXPECT_THROW(t.release(MemoryCategory::gradients, 1), std::logic_error);
}

TEST(MemoryTracker, ReportNamesCategories) {
  MemoryTracker t;
  t.allocate(MemoryCategory::loss_saved, 8);
  EXPECT_NE(t.report().find("loss_saved: current 8 B, peak 8 B"), std::string::npos);
}

}  // namespace
}  // namespace dflash
