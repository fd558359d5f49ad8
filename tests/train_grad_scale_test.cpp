// Gradient scaler and clipping: skip-and-halve on NaN/Inf sums, growth after
// the clean-step interval, bounds, the error after too many skips, resume
// from a saved state, and the clip/unscale multiplier against a gradient
// whose norm is computed independently.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "bitrank/rng.hpp"
#include "bitrank/train/grad_scale.hpp"
#include "support/expect.hpp"

namespace bitrank::train {
namespace {

using test::expect_error;
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(TrainGradScale, NonFiniteSumSkipsAndHalves) {
  GradScaler s;  // defaults: 2^16, growth every 200
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.update(12.5));
  EXPECT_EQ(s.state().clean_steps, 1);
  for (const double bad : {kNan, kInf, -kInf}) {
    const int k = s.log2_scale();
    EXPECT_FALSE(s.update(bad)) << bad;
    EXPECT_EQ(s.log2_scale(), k - 1) << bad;
    EXPECT_EQ(s.scale(), std::ldexp(1.0, k - 1));
    EXPECT_EQ(s.state().clean_steps, 0);
  }
  EXPECT_EQ(s.state().consecutive_skips, 3);
  EXPECT_EQ(s.state().skipped_total, 3);
  EXPECT_TRUE(s.update(0.0));  // a zero gradient is clean
  EXPECT_EQ(s.state().consecutive_skips, 0);
  EXPECT_EQ(s.state().skipped_total, 3);
  EXPECT_EQ(s.log2_scale(), 13);
}

TEST(TrainGradScale, DoublesAfterGrowthIntervalCleanSteps) {
  GradScaler s({.init_log2 = 10, .max_log2 = 12, .growth_interval = 200});
  for (int i = 0; i < 199; ++i) ASSERT_TRUE(s.update(1.0));
  EXPECT_EQ(s.log2_scale(), 10);  // 199 clean steps: not yet
  EXPECT_TRUE(s.update(1.0));
  EXPECT_EQ(s.log2_scale(), 11);  // the 200th
  EXPECT_EQ(s.state().clean_steps, 0);
  // A skip restarts the count.
  for (int i = 0; i < 150; ++i) s.update(1.0);
  EXPECT_FALSE(s.update(kNan));
  EXPECT_EQ(s.log2_scale(), 10);
  for (int i = 0; i < 199; ++i) s.update(1.0);
  EXPECT_EQ(s.log2_scale(), 10);
  s.update(1.0);
  EXPECT_EQ(s.log2_scale(), 11);
  // Capped at max_log2.
  for (int i = 0; i < 1000; ++i) s.update(1.0);
  EXPECT_EQ(s.log2_scale(), 12);
  EXPECT_EQ(s.scale(), 4096.0);
}

TEST(TrainGradScale, FloorAndTooManySkips) {
  GradScaler s({.init_log2 = 1, .min_log2 = -1, .max_consecutive_skips = 5});
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(s.update(kNan));
  EXPECT_EQ(s.log2_scale(), -1);  // 1 → 0 → −1, then held
  EXPECT_EQ(s.scale(), 0.5);
  expect_error([&] { s.update(kInf); }, "5 steps in a row had a non-finite gradient");
}

// A run interrupted at any step and resumed from its saved state makes the
// same decisions and ends in the same state as the uninterrupted run.
TEST(TrainGradScale, ResumeFromStateContinuesIdentically) {
  const GradScalerOptions o{.init_log2 = 8, .growth_interval = 7, .max_consecutive_skips = 10};
  std::vector<double> sums;
  XorShift g(3);
  for (int i = 0; i < 300; ++i) sums.push_back(g.next_u64() % 9 == 0 ? (i % 2 ? kNan : kInf) : 1.0 + i);
  GradScaler whole(o);
  std::vector<bool> decided;
  std::vector<int> scales;
  for (const double v : sums) {
    decided.push_back(whole.update(v));
    scales.push_back(whole.log2_scale());
  }
  EXPECT_GT(whole.state().skipped_total, 10);  // the sequence exercises skips and growth
  for (const std::size_t cut : {1u, 50u, 137u, 299u}) {
    GradScaler first(o);
    for (std::size_t i = 0; i < cut; ++i) first.update(sums[i]);
    GradScaler resumed(o, first.state());
    for (std::size_t i = cut; i < sums.size(); ++i) {
      EXPECT_EQ(resumed.update(sums[i]), decided[i]) << "cut " << cut << " step " << i;
      EXPECT_EQ(resumed.log2_scale(), scales[i]) << "cut " << cut << " step " << i;
    }
    EXPECT_EQ(resumed.state(), whole.state());
  }
}

TEST(TrainGradScale, RejectsBadOptionsAndStates) {
  expect_error([] { GradScaler({.init_log2 = 30, .max_log2 = 24}); }, "need min_log2 ≤ init_log2 ≤ max_log2");
  expect_error([] { GradScaler({.max_log2 = 200}); }, "must be in [-100, 100]");
  expect_error([] { GradScaler({.growth_interval = 0}); }, "growth_interval must be ≥ 1, got 0");
  expect_error([] { GradScaler({.max_consecutive_skips = 0}); }, "max_consecutive_skips must be ≥ 1");
  expect_error([] { GradScaler({}, {.log2_scale = 40}); }, "resumed log2_scale 40 is outside");
  expect_error([] { GradScaler({}, {.clean_steps = 200}); }, "resumed clean_steps 200");
  expect_error([] { GradScaler({}, {.consecutive_skips = 2, .skipped_total = 1}); }, "skip counts are inconsistent");
  expect_error([] { GradScaler().update(-1.0); }, "sum of squares -1 is negative");
}

// The multiplier applied to the SCALED gradient, on a random gradient whose
// true norm is computed here directly: multiplier·(scale·g) = g·min(1, c/‖g‖).
TEST(TrainGradScale, ClipMultiplierFromScaledSum) {
  std::vector<double> g(1000);
  XorShift r(11);
  for (double& v : g) v = r.next_signed() * 1e-3;
  double norm2 = 0;
  for (const double v : g) norm2 += v * v;
  const double norm = std::sqrt(norm2);
  for (const double scale : {1.0, 1024.0, 65536.0, 0.25}) {
    double scaled_sum = 0;
    for (const double v : g) scaled_sum += (v * scale) * (v * scale);
    EXPECT_NEAR(grad_norm_from_scaled(scaled_sum, scale), norm, 1e-14 * norm) << scale;
    for (const double max_norm : {0.0, norm / 4, norm * 4}) {
      const double m = grad_multiplier(scaled_sum, scale, max_norm);
      double out2 = 0;  // ‖m·(scale·g)‖²
      for (const double v : g) out2 += (m * v * scale) * (m * v * scale);
      const double expected = max_norm == 0 ? norm : std::min(norm, max_norm);
      EXPECT_NEAR(std::sqrt(out2), expected, 1e-12 * expected) << "scale " << scale << " max_norm " << max_norm;
    }
  }
  EXPECT_EQ(clip_multiplier(5.0, 1.0), 0.2);
  EXPECT_EQ(clip_multiplier(5.0, 10.0), 1.0);
  EXPECT_EQ(clip_multiplier(5.0, 5.0), 1.0);
  EXPECT_EQ(clip_multiplier(0.0, 1.0), 1.0);  // a zero gradient is left alone
  EXPECT_EQ(clip_multiplier(5.0, 0.0), 1.0);  // clipping off
  EXPECT_EQ(grad_norm_from_scaled(25.0 * 64 * 64, 64.0), 5.0);  // 3-4-5 under scale 64
  EXPECT_EQ(grad_multiplier(25.0 * 64 * 64, 64.0, 1.0), 0.2 / 64);
}

TEST(TrainGradScale, ClipRejectsNonFinite) {
  expect_error([] { grad_norm_from_scaled(kNan, 1.0); }, "skip non-finite steps before clipping");
  expect_error([] { grad_norm_from_scaled(kInf, 1.0); }, "sum of squares must be finite");
  expect_error([] { grad_norm_from_scaled(-1.0, 1.0); }, "sum of squares must be finite and ≥ 0, got -1");
  expect_error([] { grad_norm_from_scaled(1.0, 0.0); }, "grad_scale must be finite and > 0, got 0");
  expect_error([] { grad_norm_from_scaled(1.0, kNan); }, "grad_scale must be finite");
  expect_error([] { clip_multiplier(kNan, 1.0); }, "gradient norm must be finite");
  expect_error([] { clip_multiplier(1.0, -1.0); }, "max_norm must be finite and ≥ 0, got -1");
  expect_error([] { grad_multiplier(kNan, 1.0, 1.0); }, "sum of squares must be finite");
}

}  // namespace
}  // namespace bitrank::train
