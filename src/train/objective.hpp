// The training objectives of `bitrank compress` behind one interface, and
// the step loop they share (internal to src/train; DESIGN §7).
//
//   layer       each block learns the teacher block's output from the
//               teacher's hidden states at its input (MSE), block by block;
//   sequential  the same targets, from the hidden states the already-trained
//               student blocks before it produce (GPTQ-style: each block
//               corrects the error the student has accumulated so far);
//   e2e         every block at once: KL(teacher ‖ student) on the logits +
//               (λ/T)·Σ block-output MSE (train/e2e.hpp).
//
// An objective trains `units()` units (a block each for layer and
// sequential, the whole model for e2e) of o.steps steps. run_steps is the
// one loop every unit's steps go through: the learning-rate schedule, the
// step's timing, the step log and progress line, the checkpoint cadence, and
// the test hooks' place.
#pragma once

#include <memory>
#include <string>

#include "train/compress_run.hpp"

namespace bitrank::train {

class Objective {
 public:
  virtual ~Objective() = default;
  // Training units: blocks, or 1 (e2e).
  virtual index_t units(const CompressRun& run) const = 0;
  // Trains units first_block.. from step first_step of the first; each
  // finished unit's weights go to run.ckpt.trained / trained_gains.
  virtual void train(CompressRun& run) = 0;
  // For the loss plot.
  virtual std::string curve_label(std::size_t unit) const = 0;
  virtual std::string plot_title() const = 0;
  virtual std::string loss_label() const = 0;
};

// "layer", "sequential" or "e2e" (validate() has checked the name).
std::unique_ptr<Objective> make_objective(const std::string& name);
std::unique_ptr<Objective> make_layerwise_objective(bool sequential);  // objective_layerwise.cpp
std::unique_ptr<Objective> make_e2e_objective();                       // objective_e2e.cpp

// What one step reports to the loop.
struct StepOutcome {
  double loss = 0;
  double grad_scale = 0;
  std::int64_t flips = 0;
  bool skipped = false;
  std::vector<double> block_loss{};
};

// Steps s0..o.steps−1 of unit `unit` (global step = step_base + s):
// step(s, opt) runs one step with the scheduled options and returns its
// outcome; then the loop logs it; at the unit's last step done() stores the
// trained unit and writes its checkpoint, otherwise every checkpoint_every
// global steps checkpoint(s + 1) writes one; after(record) runs last (the
// test hooks).
template <class Step, class Done, class Checkpoint, class After>
void run_steps(CompressRun& run, std::int64_t step_base, std::int64_t s0, Step&& step, Done&& done,
               Checkpoint&& checkpoint, After&& after) {
  const CompressOptions& o = run.o;
  const LrSchedule schedule(run.schedule);
  CompressBlockLog& unit_log = run.ckpt.blocks.back();
  for (std::int64_t s = s0; s < o.steps; ++s) {
    const std::int64_t global = step_base + s;
    const auto t_step = CompressClock::now();
    const LayerwiseOptions opt = scheduled(o.train, schedule.lr(s));
    const StepOutcome r = step(s, opt);
    run.be.memory->synchronize();
    run.train_seconds += seconds_since(t_step);
    unit_log.losses.push_back(r.loss);
    unit_log.flips += r.flips;
    unit_log.skipped += r.skipped ? 1 : 0;
    run.rec = StepRecord{.step = global,
                         .loss = r.loss,
                         .lr = opt.scales.lr,
                         .scale = r.grad_scale,
                         .flips = r.flips,
                         .skipped = r.skipped,
                         .tokens = run.rec.tokens + run.rows(),
                         .seconds = run.train_seconds,
                         .block_loss = r.block_loss};
    run.log->write(run.rec);
    run.progress->step(run.rec);
    if (s + 1 == o.steps)
      done();
    else if (o.checkpoint_every > 0 && (global + 1) % o.checkpoint_every == 0)
      checkpoint(s + 1);
    after(run.rec);
    if (o.hooks.on_step) o.hooks.on_step(run.rec);
  }
}

}  // namespace bitrank::train
