// Learning-rate schedule of the trainer (DESIGN §7): linear warmup, then
// cosine decay to a floor.
//
// With peak η, W = warmup_steps, N = total_steps, floor φ·η and the 0-based
// step s (every attempted step counts, skipped ones too, so N is the length
// of the run whatever the grad scaler does):
//     s < W:       lr = η·(s+1)/W                       (step 0 already learns)
//     W ≤ s < N:   p = (s−W)/(N−W),  lr = φη + (η−φη)·½(1 + cos πp)
//     s ≥ N:       lr = φη                              (training past the plan)
// This is llm.c's schedule: step W−1 and step W both run at the peak, the
// last step N−1 runs just above the floor, no step has lr = 0 unless φ = 0
// and s ≥ N. Computed in f64.
#pragma once

#include <cstdint>

namespace bitrank::train {

struct LrScheduleOptions {
  double peak = 1e-3;              // η
  std::int64_t warmup_steps = 0;   // W ≥ 0, ≤ total_steps
  std::int64_t total_steps = 1;    // N ≥ 1
  double floor_fraction = 0.1;     // φ ∈ [0, 1]: the final lr is φ·η
  bool operator==(const LrScheduleOptions&) const = default;
};

// Error (naming the option and its value) unless the options are as above:
// peak finite and > 0, 0 ≤ W ≤ N, N ≥ 1, φ ∈ [0, 1].
void validate(const LrScheduleOptions& options);

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleOptions& options);  // validates
  // The learning rate of 0-based step `step` (Error when step < 0).
  double lr(std::int64_t step) const;
  const LrScheduleOptions& options() const { return o_; }

 private:
  LrScheduleOptions o_;
};

}  // namespace bitrank::train
