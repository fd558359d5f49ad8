// Trainer reports (DESIGN §7): the per-step record, its JSON-lines log and
// the progress line.
//
// Step log: one JSON object per line and per step, flushed as written, e.g.
//   {"step":41,"loss":0.0123,"lr":0.000998,"scale":65536,"flips":1834,
//    "skipped":false,"tokens":172032,"seconds":93.5,"block_loss":[…]}
// step is 0-based (the schedule's step); tokens and seconds are cumulative
// over the whole run, resumed runs included; flips counts this step's sign
// flips; block_loss (the layer-wise objective's loss per block) is written
// only when non-empty. A non-finite loss is written as null (JSON has no
// NaN) and read back as NaN.
//
// Resume: a run resumed from a checkpoint taken after `resume_step` steps
// keeps the log's records of steps < resume_step and cuts the file before
// the first later one (records the interrupted run wrote after its last
// checkpoint, or a half-written last line), so the log reads as one run.
//
// Progress: "step 120/2000  31.2k tok/s  loss 0.01234  flips 1834/step
// ETA 1h02m" (plus "skipped N" once steps of this process were skipped) through
// ProgressLine (bitrank/progress.hpp). Loss and flips are means over the
// steps since the last line shown; tokens/s and ETA come from this
// process's steps (a resumed run's earlier time is not counted).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "bitrank/progress.hpp"

namespace bitrank::train {

struct StepRecord {
  std::int64_t step = 0;       // 0-based
  double loss = 0;             // the objective's value of this step (NaN when unknown)
  double lr = 0;               // the learning rate used
  double scale = 0;            // the gradient scale used
  std::int64_t flips = 0;      // sign flips in this step
  bool skipped = false;        // non-finite gradient: nothing updated
  std::int64_t tokens = 0;     // cumulative tokens after this step
  double seconds = 0;          // cumulative training seconds after this step
  std::vector<double> block_loss{};  // optional per-block losses
};

// One record as one line of JSON (no newline) and back; `source` names the
// line in errors (file:line). Errors name the missing or mistyped key.
std::string step_record_json(const StepRecord& record);
StepRecord parse_step_record(std::string_view line, std::string_view source);

class StepLog {
 public:
  // resume_step < 0: start `path` afresh; ≥ 0: keep its records of steps
  // < resume_step (see above; a missing file starts empty). Error when the
  // file cannot be written or a kept line is not a record.
  explicit StepLog(const std::filesystem::path& path, std::int64_t resume_step = -1);
  void write(const StepRecord& record);  // one line, flushed
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

// Every record of a step log, in file order (Error naming file:line on a bad line).
std::vector<StepRecord> read_step_log(const std::filesystem::path& path);

// The progress text, from its figures (see above).
struct ProgressFigures {
  std::int64_t step = 0;        // steps done (1-based count)
  std::int64_t total_steps = 0;
  double tokens_per_s = 0;
  double loss = 0;
  double flips_per_step = 0;
  std::int64_t skipped = 0;     // steps skipped by this process (non-finite gradients)
  double eta_s = 0;
  std::int64_t steps_per_block = 0;  // > 0: a block-wise run, shown as "block b/B step s/S"
  const char* loss_name = "loss";    // what the loss is ("block MSE", "KL + MSE")
};
std::string train_progress_text(const ProgressFigures& figures);

class TrainProgress {
 public:
  // `start` is the record of the last step before this process started (resume), or
  // none: a fresh run starts at step 0 with 0 tokens and 0 seconds.
  TrainProgress(std::int64_t total_steps, const StepRecord* start = nullptr, ProgressLine::Options line = {});
  // A block-wise run: `steps_per_block` steps a block; the loss is named `loss_name`.
  void describe(std::int64_t steps_per_block, const char* loss_name);
  void step(const StepRecord& record);  // after every step
  void finish();                        // the last figures on their own line

 private:
  ProgressFigures figures(const StepRecord& r) const;

  ProgressLine line_;
  std::int64_t total_;
  std::int64_t steps_per_block_ = 0;
  const char* loss_name_ = "loss";
  std::int64_t start_step_ = 0, start_tokens_ = 0;
  double start_seconds_ = 0;
  std::int64_t skipped_ = 0;
  // Since the last line shown:
  double loss_sum_ = 0;
  std::int64_t loss_count_ = 0, flips_sum_ = 0, steps_ = 0;
  StepRecord last_;
  std::string last_text_;  // the last line shown
};

}  // namespace bitrank::train
