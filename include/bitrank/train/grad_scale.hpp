// Dynamic gradient (loss) scale and gradient-norm clipping (DESIGN §7).
//
// Gradients are staged into f16 multiplied by a power of two, scale = 2^k,
// so small gradients keep their bits and the multiplication is exact. After
// the backward the trainer reduces the sum of squares of the SCALED
// gradients, Σ(scale·g)² (ops/reduce.hpp's sum_squares, which propagates NaN
// and Inf), and hands it to GradScaler::update:
//   non-finite → the step is skipped (no parameter, moment or sign changes),
//                k ← max(k − 1, min_log2), the clean-step count restarts;
//   finite     → the step is applied; after `growth_interval` consecutive
//                clean steps k ← min(k + 1, max_log2) and the count restarts.
// `max_consecutive_skips` skips in a row is an Error: the loss or weights
// themselves are not finite, and a run that only skips would be silent garbage.
//
// growth_interval defaults to 200 (PyTorch's GradScaler uses 2000). A scale
// at the overflow edge oscillates: it grows, the next step overflows and is
// skipped, it halves — one skipped step per interval, so 200 wastes at most
// 0.5% of steps, while a transient spike that cost k halvings is recovered
// in 200·k steps instead of 2000·k — our runs are a few thousand steps, and
// at 2000 one early spike would leave the scale low for the rest of the run.
//
// Clipping: ‖g‖ of the TRUE gradient is √(Σ(scale·g)²) / scale; the clip
// multiplier is min(1, max_norm/‖g‖) (1 when clipping is off or ‖g‖ = 0).
// The optimizer reads the scaled gradient, so it is given
// grad_multiplier = clip / scale (AdamOptions::grad_scale): unscaling and
// clipping in one multiplication. Every function below names which sum of
// squares (scaled or true) it takes.
#pragma once

#include <cstdint>

namespace bitrank::train {

struct GradScalerOptions {
  int init_log2 = 16;                    // k at the start: scale 65536
  int min_log2 = -24;                    // k never goes below (still skips)
  int max_log2 = 24;                     // k never grows above
  std::int64_t growth_interval = 200;    // clean steps in a row before k += 1 (see above)
  std::int64_t max_consecutive_skips = 64;  // this many skips in a row: Error
};

// Everything a resume needs (stored in the trainer state, state.hpp).
struct GradScalerState {
  int log2_scale = 16;                 // k: scale = 2^k
  std::int64_t clean_steps = 0;        // consecutive applied steps since k last changed or a skip
  std::int64_t consecutive_skips = 0;  // skips in a row up to now
  std::int64_t skipped_total = 0;      // skipped steps over the whole run
  bool operator==(const GradScalerState&) const = default;
};

// Error naming the option unless min_log2 ≤ init_log2 ≤ max_log2, all within
// [−100, 100] (2^k stays a normal f32/f64), growth_interval ≥ 1,
// max_consecutive_skips ≥ 1.
void validate(const GradScalerOptions& options);

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});  // validates; state from init_log2
  GradScaler(const GradScalerOptions& options, const GradScalerState& state);  // resume (state checked against options)

  double scale() const;  // 2^k, exact
  int log2_scale() const { return s_.log2_scale; }
  // Takes Σ(scale·g)² over every gradient of the step, as reduced with the
  // current scale(). Returns true when the step is to be applied, false when
  // it is skipped; updates the scale as described above. Error after
  // max_consecutive_skips skips in a row.
  bool update(double scaled_sum_squares);
  const GradScalerState& state() const { return s_; }
  const GradScalerOptions& options() const { return o_; }

 private:
  GradScalerOptions o_;
  GradScalerState s_;
};

// ‖g‖ of the true gradient from the sum of squares of the gradient scaled by
// grad_scale (> 0, finite): √scaled_sum_squares / grad_scale. Error when the
// sum is negative or not finite (a non-finite step is skipped, never clipped).
double grad_norm_from_scaled(double scaled_sum_squares, double grad_scale);

// min(1, max_norm / grad_norm) for the TRUE gradient norm; 1 when max_norm
// is 0 (clipping off) or grad_norm is 0. Error when max_norm < 0 or either
// is not finite.
double clip_multiplier(double grad_norm, double max_norm);

// What the optimizer multiplies the SCALED gradient by: clip / grad_scale,
// with clip = clip_multiplier(grad_norm_from_scaled(...), max_norm).
double grad_multiplier(double scaled_sum_squares, double grad_scale, double max_norm);

}  // namespace bitrank::train
