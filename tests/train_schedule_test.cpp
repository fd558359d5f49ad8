// Learning-rate schedule: values at the key steps against the formulas of
// include/bitrank/train/schedule.hpp written out by hand, shape (monotone,
// never below the floor), edge cases and option validation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "bitrank/train/schedule.hpp"
#include "support/expect.hpp"

namespace bitrank::train {
namespace {

using test::expect_error;

// η = 1e-3, W = 10, N = 110, φ = 0.1: the decay spans 100 steps.
TEST(TrainSchedule, ValuesAtKeySteps) {
  const LrSchedule s({.peak = 1e-3, .warmup_steps = 10, .total_steps = 110, .floor_fraction = 0.1});
  const double tol = 1e-15;
  EXPECT_NEAR(s.lr(0), 1e-4, tol);    // (0+1)/10 of the peak: the first step already learns
  EXPECT_NEAR(s.lr(4), 5e-4, tol);    // halfway up
  EXPECT_NEAR(s.lr(9), 1e-3, tol);    // last warmup step: the peak
  EXPECT_NEAR(s.lr(10), 1e-3, tol);   // first decay step: p = 0, cos 0 = 1
  EXPECT_NEAR(s.lr(35), 1e-4 + 9e-4 * 0.5 * (1 + std::sqrt(0.5)), tol);  // p = 1/4: cos(π/4) = √½
  EXPECT_NEAR(s.lr(60), 5.5e-4, tol);  // p = 1/2: midway between peak and floor
  EXPECT_NEAR(s.lr(85), 1e-4 + 9e-4 * 0.5 * (1 - std::sqrt(0.5)), tol);  // p = 3/4
  // Last step, p = 99/100: just above the floor (1 + cos(0.99π) = 2·sin²(0.005π)).
  const double last = 1e-4 + 9e-4 * std::pow(std::sin(0.005 * std::numbers::pi), 2);
  EXPECT_NEAR(s.lr(109), last, tol);
  EXPECT_GT(s.lr(109), 1e-4);
  EXPECT_LT(s.lr(109), 1.003e-4);  // within 0.3% of the floor
  EXPECT_EQ(s.lr(110), 1e-3 * 0.1);  // past the plan: the floor
  EXPECT_EQ(s.lr(1000000), 1e-3 * 0.1);
}

TEST(TrainSchedule, RisesThenFallsNeverBelowFloor) {
  const LrSchedule s({.peak = 3e-4, .warmup_steps = 37, .total_steps = 1000, .floor_fraction = 0.05});
  for (std::int64_t t = 1; t < 37; ++t) EXPECT_GT(s.lr(t), s.lr(t - 1)) << t;
  for (std::int64_t t = 38; t < 1100; ++t) EXPECT_LE(s.lr(t), s.lr(t - 1)) << t;
  for (std::int64_t t = 0; t < 1100; ++t) EXPECT_LE(s.lr(t), 3e-4) << t;
  for (std::int64_t t = 37; t < 1100; ++t) EXPECT_GE(s.lr(t), 3e-4 * 0.05) << t;  // the floor bounds the decay
}

TEST(TrainSchedule, EdgeCases) {
  // No warmup: step 0 runs at the peak.
  const LrSchedule a({.peak = 2.0, .warmup_steps = 0, .total_steps = 4, .floor_fraction = 0.0});
  EXPECT_EQ(a.lr(0), 2.0);
  EXPECT_NEAR(a.lr(2), 1.0, 1e-15);  // p = 1/2
  EXPECT_EQ(a.lr(4), 0.0);           // floor 0 after the plan
  // All warmup: the ramp ends at the peak on the last step.
  const LrSchedule b({.peak = 1.0, .warmup_steps = 4, .total_steps = 4, .floor_fraction = 0.5});
  EXPECT_EQ(b.lr(0), 0.25);
  EXPECT_EQ(b.lr(3), 1.0);
  EXPECT_EQ(b.lr(4), 0.5);
  // One step.
  const LrSchedule c({.peak = 1.0, .warmup_steps = 0, .total_steps = 1, .floor_fraction = 0.5});
  EXPECT_EQ(c.lr(0), 1.0);
  // Floor 1: constant after warmup.
  const LrSchedule d({.peak = 1.0, .warmup_steps = 2, .total_steps = 10, .floor_fraction = 1.0});
  for (std::int64_t t = 1; t < 20; ++t) EXPECT_EQ(d.lr(t), 1.0) << t;
}

TEST(TrainSchedule, RejectsBadOptions) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_error([] { LrSchedule({.peak = 0}); }, "peak must be finite and > 0, got 0");
  expect_error([&] { LrSchedule({.peak = nan}); }, "peak must be finite");
  expect_error([] { LrSchedule({.peak = std::numeric_limits<double>::infinity()}); }, "peak must be finite");
  expect_error([] { LrSchedule({.total_steps = 0}); }, "total_steps must be ≥ 1, got 0");
  expect_error([] { LrSchedule({.warmup_steps = -1, .total_steps = 5}); }, "warmup_steps must be in [0, total_steps = 5], got -1");
  expect_error([] { LrSchedule({.warmup_steps = 6, .total_steps = 5}); }, "got 6");
  expect_error([] { LrSchedule({.floor_fraction = 1.5}); }, "floor_fraction must be in [0, 1], got 1.5");
  expect_error([&] { LrSchedule({.floor_fraction = nan}); }, "floor_fraction must be in [0, 1]");
  expect_error([] { LrSchedule({}).lr(-1); }, "step must be ≥ 0, got -1");
}

}  // namespace
}  // namespace bitrank::train
