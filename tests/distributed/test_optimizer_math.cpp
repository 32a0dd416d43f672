// TRAINING §12's formulas (common/adamw.hpp) against values computed by hand: a Python transcription
// of the formulas as §12 writes them (the literals below, printed with repr), for the schedule, the
// clipping coefficient and three AdamW steps of one element.
#include <cmath>

#include <gtest/gtest.h>

#include "common/adamw.hpp"
#include "common/tolerances.hpp"

namespace dflash {
namespace {

double rel(double a, double b) { return std::abs(a - b) / std::abs(b); }

TEST(OptimizerMath, ScheduleWarmsUpThenFollowsTheCosineThenStaysAtTheFloor) {
  // lr 6e-4, min_lr 1e-5, warm-up 2, total 6: t = 0 ... 7.
  const double want[] = {0.0003, 0.0006, 0.0006, 0.0005135965004500314, 0.000305, 9.640349954996848e-05, 1e-05, 1e-05};
  for (int t = 0; t < 8; ++t) {
    EXPECT_LE(rel(learning_rate_at(t, 6e-4, 1e-5, 2, 6), want[t]), kHandFormulaTolerance) << "t = " << t;
  }
  EXPECT_EQ(learning_rate_at(0, 6e-4, 0, 0, 1), 6e-4);  // no warm-up: the cosine starts at lr
  EXPECT_EQ(learning_rate_at(5, 6e-4, 0, 5, 5), 0.0);   // total = warm-up: the floor right after
}

TEST(OptimizerMath, ClippingIsClipGradNormsCoefficient) {
  EXPECT_EQ(clip_coefficient(2.0, 1.0), 1.0 / (2.0 + 1e-6));
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);                 // c > 1: not clipped
  EXPECT_EQ(clip_coefficient(1.0, 1.0), 1.0 / (1.0 + 1e-6));  // n = max: clipped, barely (torch's 1e-6)
  EXPECT_EQ(clip_coefficient(1e9, 0.0), 1.0);                 // max_grad_norm 0 disables
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0);                 // W = 0: zero gradient
}

TEST(OptimizerMath, ThreeAdamWStepsOfOneElementMatchTheHandValues) {
  // theta 0.5, gradients 0.3, -0.2, 0.1; the schedule above; betas 0.9, 0.95; eps 1e-8; wd 0.1.
  const double g[] = {0.3, -0.2, 0.1};
  const double theta_want[] = {0.49968500001, 0.4995678842150521, 0.49936835572822946};
  const double m_want[] = {0.029999999999999992, 0.006999999999999996, 0.016299999999999995};
  const double v_want[] = {0.004500000000000004, 0.006275000000000005, 0.006461250000000005};
  double theta = 0.5, m = 0, v = 0;
  for (int t = 0; t < 3; ++t) {
    const AdamWScalars s = adamw_scalars(learning_rate_at(t, 6e-4, 1e-5, 2, 6), 0.1, true, 0.9, 0.95, 1e-8, t);
    adamw_update(theta, m, v, g[t], s);
    EXPECT_LE(rel(theta, theta_want[t]), kHandFormulaTolerance) << "t = " << t;
    EXPECT_LE(rel(m, m_want[t]), kHandFormulaTolerance) << "t = " << t;
    EXPECT_LE(rel(v, v_want[t]), kHandFormulaTolerance) << "t = " << t;
  }
}

TEST(OptimizerMath, NormWeightsAreNotDecayed) {
  double decayed = 1.0, plain = 1.0, m1 = 0, v1 = 0, m2 = 0, v2 = 0;
  adamw_update(decayed, m1, v1, 0.0, adamw_scalars(0.1, 0.5, true, 0.9, 0.95, 1e-8, 0));
  adamw_update(plain, m2, v2, 0.0, adamw_scalars(0.1, 0.5, false, 0.9, 0.95, 1e-8, 0));
  EXPECT_EQ(decayed, 1.0 - 0.1 * 0.5);  // zero gradient: only the decay moves it
  EXPECT_EQ(plain, 1.0);
}

}  // namespace
}  // namespace dflash
