// The trainer's own resume state, independent of the model: step counts,
// the data position, the gradient scaler, the schedule and the run's
// totals. The checkpoint stores it as one JSON string in its metadata under
// kTrainerStateKey, next to the model's tensors and optimizer moments
// (written atomically by the checkpoint writer of src/io).
//
// JSON layout (every key required, no others; integers exact, u64 too):
//   {"format": "bitrank.trainer_state", "version": 1,
//    "step": 1200, "applied_steps": 1197, "flip_seed": 7,
//    "tokens": 4915200, "seconds": 3812.5,
//    "data": {"seed": 1, "epoch": 0, "index": 9600, "seq_len": 512,
//             "windows_per_step": 8, "windows": 6102,
//             "fingerprint": "89ab…" (16 hex digits)},
//    "scaler": {"log2_scale": 15, "clean_steps": 37, "consecutive_skips": 0,
//               "skipped_total": 3},
//    "schedule": {"peak": 0.001, "warmup_steps": 100, "total_steps": 5000,
//                 "floor_fraction": 0.1}}
// Doubles are written shortest-round-trip, so a state reads back bit for bit.
// Reading checks the invariants (step = applied_steps + skipped_total,
// counts ≥ 0, index < windows, the schedule valid) and names what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "bitrank/train/data.hpp"
#include "bitrank/train/grad_scale.hpp"
#include "bitrank/train/schedule.hpp"

namespace bitrank::train {

inline constexpr std::string_view kTrainerStateKey = "bitrank.trainer_state";

struct TrainerState {
  std::int64_t step = 0;           // steps done, skipped ones included: the next step's 0-based index (schedule)
  std::int64_t applied_steps = 0;  // steps applied: the next optimizer step is t = applied_steps + 1
  std::uint64_t flip_seed = 0;     // SignOptions::seed of the stochastic flips (their counters derive from t)
  std::int64_t tokens = 0;         // tokens trained on so far
  double seconds = 0;              // training wall time so far, over every run
  DataPosition data{};             // where the next batch starts
  GradScalerState scaler{};
  LrScheduleOptions schedule{};    // the run's schedule: the next lr is LrSchedule(schedule).lr(step)
  bool operator==(const TrainerState&) const = default;
};

std::string trainer_state_to_json(const TrainerState& state);
// `source` names the checkpoint in errors.
TrainerState trainer_state_from_json(std::string_view text, std::string_view source);

}  // namespace bitrank::train
