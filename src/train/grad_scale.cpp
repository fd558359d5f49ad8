// Dynamic power-of-two gradient scale and norm clipping (contract:
// include/bitrank/train/grad_scale.hpp).
#include "bitrank/train/grad_scale.hpp"

#include <cmath>

#include "bitrank/error.hpp"

namespace bitrank::train {

namespace {
constexpr int kLog2Limit = 100;  // 2^±100 is a normal f32 and f64: the scale stays exact
}

void validate(const GradScalerOptions& o) {
  if (o.min_log2 < -kLog2Limit || o.max_log2 > kLog2Limit)
    fail("grad scaler: min_log2 and max_log2 must be in [{}, {}], got {} and {}", -kLog2Limit, kLog2Limit,
         o.min_log2, o.max_log2);
  if (!(o.min_log2 <= o.init_log2 && o.init_log2 <= o.max_log2))
    fail("grad scaler: need min_log2 ≤ init_log2 ≤ max_log2, got {} ≤ {} ≤ {}", o.min_log2, o.init_log2, o.max_log2);
  if (o.growth_interval < 1) fail("grad scaler: growth_interval must be ≥ 1, got {}", o.growth_interval);
  if (o.max_consecutive_skips < 1)
    fail("grad scaler: max_consecutive_skips must be ≥ 1, got {}", o.max_consecutive_skips);
}

GradScaler::GradScaler(const GradScalerOptions& options) : o_(options) {
  validate(o_);
  s_.log2_scale = o_.init_log2;
}

GradScaler::GradScaler(const GradScalerOptions& options, const GradScalerState& state) : o_(options), s_(state) {
  validate(o_);
  if (s_.log2_scale < o_.min_log2 || s_.log2_scale > o_.max_log2)
    fail("grad scaler: resumed log2_scale {} is outside [min_log2 {}, max_log2 {}]", s_.log2_scale, o_.min_log2,
         o_.max_log2);
  if (s_.clean_steps < 0 || s_.clean_steps >= o_.growth_interval)
    fail("grad scaler: resumed clean_steps {} is outside [0, growth_interval {})", s_.clean_steps, o_.growth_interval);
  if (s_.consecutive_skips < 0 || s_.consecutive_skips >= o_.max_consecutive_skips ||
      s_.skipped_total < s_.consecutive_skips)
    fail("grad scaler: resumed skip counts are inconsistent (consecutive {}, total {}, limit {})",
         s_.consecutive_skips, s_.skipped_total, o_.max_consecutive_skips);
}

double GradScaler::scale() const { return std::ldexp(1.0, s_.log2_scale); }

bool GradScaler::update(double scaled_sum_squares) {
  if (std::isfinite(scaled_sum_squares)) {
    if (scaled_sum_squares < 0) fail("grad scaler: sum of squares {} is negative", scaled_sum_squares);
    s_.consecutive_skips = 0;
    if (++s_.clean_steps >= o_.growth_interval) {
      s_.clean_steps = 0;
      if (s_.log2_scale < o_.max_log2) ++s_.log2_scale;
    }
    return true;
  }
  ++s_.skipped_total;
  s_.clean_steps = 0;
  if (s_.log2_scale > o_.min_log2) --s_.log2_scale;
  if (++s_.consecutive_skips >= o_.max_consecutive_skips)
    fail("grad scaler: {} steps in a row had a non-finite gradient (last sum of squares {}, scale now 2^{}): "
         "the loss or the weights are not finite",
         s_.consecutive_skips, scaled_sum_squares, s_.log2_scale);
  return false;
}

double grad_norm_from_scaled(double scaled_sum_squares, double grad_scale) {
  if (!std::isfinite(grad_scale) || grad_scale <= 0) fail("grad norm: grad_scale must be finite and > 0, got {}", grad_scale);
  if (!std::isfinite(scaled_sum_squares) || scaled_sum_squares < 0)
    fail("grad norm: sum of squares must be finite and ≥ 0, got {} (skip non-finite steps before clipping)",
         scaled_sum_squares);
  return std::sqrt(scaled_sum_squares) / grad_scale;
}

double clip_multiplier(double grad_norm, double max_norm) {
  if (!std::isfinite(max_norm) || max_norm < 0) fail("grad clip: max_norm must be finite and ≥ 0, got {}", max_norm);
  if (!std::isfinite(grad_norm) || grad_norm < 0) fail("grad clip: gradient norm must be finite and ≥ 0, got {}", grad_norm);
  if (max_norm == 0 || grad_norm <= max_norm) return 1.0;
  return max_norm / grad_norm;
}

double grad_multiplier(double scaled_sum_squares, double grad_scale, double max_norm) {
  return clip_multiplier(grad_norm_from_scaled(scaled_sum_squares, grad_scale), max_norm) / grad_scale;
}

}  // namespace bitrank::train
