// Warmup + cosine learning-rate schedule (contract: include/bitrank/train/schedule.hpp).
#include "bitrank/train/schedule.hpp"

#include <cmath>
#include <numbers>

#include "bitrank/error.hpp"

namespace bitrank::train {

void validate(const LrScheduleOptions& o) {
  if (!std::isfinite(o.peak) || o.peak <= 0) fail("lr schedule: peak must be finite and > 0, got {}", o.peak);
  if (o.total_steps < 1) fail("lr schedule: total_steps must be ≥ 1, got {}", o.total_steps);
  if (o.warmup_steps < 0 || o.warmup_steps > o.total_steps)
    fail("lr schedule: warmup_steps must be in [0, total_steps = {}], got {}", o.total_steps, o.warmup_steps);
  if (!(o.floor_fraction >= 0 && o.floor_fraction <= 1))
    fail("lr schedule: floor_fraction must be in [0, 1], got {}", o.floor_fraction);
}

LrSchedule::LrSchedule(const LrScheduleOptions& options) : o_(options) { validate(o_); }

double LrSchedule::lr(std::int64_t s) const {
  if (s < 0) fail("lr schedule: step must be ≥ 0, got {}", s);
  const double floor = o_.floor_fraction * o_.peak;
  if (s < o_.warmup_steps) return o_.peak * static_cast<double>(s + 1) / static_cast<double>(o_.warmup_steps);
  if (s >= o_.total_steps) return floor;
  const double p = static_cast<double>(s - o_.warmup_steps) / static_cast<double>(o_.total_steps - o_.warmup_steps);
  return floor + (o_.peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace bitrank::train
