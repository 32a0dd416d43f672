#include <gtest/gtest.h>

#include "reference/scalar.hpp"
#include "reference/tensor.hpp"

namespace dflash {
namespace {

TEST(Tensor, CountsItsBytesWhileAlive) {
  MemoryTracker t;
  {
    Tensor<double> a(t, MemoryCategory::saved, {3, 4});
    EXPECT_EQ(a.numel(), 12);
    EXPECT_EQ(a.bytes(), 96u);
    EXPECT_EQ(t.current(MemoryCategory::saved), 96u);
    EXPECT_EQ(a[5], 0.0);  // zero-initialised
  }
  EXPECT_EQ(t.current(MemoryCategory::saved), 0u);
  EXPECT_EQ(t.peak(MemoryCategory::saved), 96u);
}

TEST(Tensor, MoveTransfersOwnershipWithoutRecounting) {
  MemoryTracker t;
  Tensor<double> a(t, MemoryCategory::transient, {10});
  Tensor<double> b = std::move(a);
  EXPECT_EQ(t.current(MemoryCategory::transient), 80u);
  Tensor<double> c(t, MemoryCategory::transient, {2});
  c = std::move(b);  // c's old 16 bytes are released
  EXPECT_EQ(t.current(MemoryCategory::transient), 80u);
}

TEST(Tensor, CloneReleaseAndRecategorize) {
  MemoryTracker t;
  Tensor<double> a(t, MemoryCategory::inputs, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor<double> b = a.clone(MemoryCategory::saved);
  EXPECT_EQ(b.row(1)[2], 6.0);
  EXPECT_EQ(t.current(MemoryCategory::saved), 48u);
  b.recategorize(MemoryCategory::gradients);
  EXPECT_EQ(t.current(MemoryCategory::saved), 0u);
  EXPECT_EQ(t.current(MemoryCategory::gradients), 48u);
  b.release();
  EXPECT_EQ(t.current(MemoryCategory::gradients), 0u);
  EXPECT_EQ(b.numel(), 0);
}

TEST(Tensor, MultiprecisionElementsAreCountedAtTheirSize) {
  MemoryTracker t;
  Tensor<Mp50> a(t, MemoryCategory::saved, {4});
  EXPECT_EQ(t.current(MemoryCategory::saved), 4 * sizeof(Mp50));
}

TEST(Tensor, BadShapesAndValuesAreRejected) {
  MemoryTracker t;
  EXPECT_THROW(Tensor<double>(t, MemoryCategory::saved, {2, -1}), InputError);
  EXPECT_THROW(Tensor<double>(t, MemoryCategory::saved, {2, 2}, {1, 2, 3}), InputError);
  EXPECT_EQ(t.current_total(), 0u);
}

}  // namespace
}  // namespace dflash
