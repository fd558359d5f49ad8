// The layer-wise and sequential objectives (objective.hpp): block by block,
// a student block learns the teacher block's output (MSE, layerwise.hpp).
//
// The training windows of the whole run are fixed up front (run.step_ids).
// Hidden states at the current block's input are kept for all of them, one
// [rows][hidden] slab per step (HiddenStates): on the device when the run is
// neither streamed nor capped (a step reads its windows in place), else in
// host memory with one step's slab moved to the device at a time.
//   x   the teacher's hidden states at block b's input;
//   y   the teacher block's output on x: the target;
//   xs  (sequential) the student's hidden states at block b's input: the
//       trained student blocks 0..b−1 applied to the embeddings.
// Block b: y = teacher_b(x); the student trains on (x or xs) → y; then
// xs = student_b(xs) (sequential) and x = y. Only one student block lives
// on the backend at a time.
//
// Resume: x (and xs) at first_block's input are recomputed as the first
// run computed them (teacher blocks, and the trained student blocks from
// the checkpoint, over the same windows), then training continues.
#include <fmt/format.h>

#include <optional>

#include "bitrank/error.hpp"
#include "bitrank/log.hpp"
#include "train/objective.hpp"

namespace bitrank::train {
namespace {

// Hidden states of every step's windows, [steps][rows][d].
class HiddenStates {
 public:
  HiddenStates(Memory& mem, bool on_device, std::int64_t steps, index_t rows, index_t d)
      : mem_(&mem),
        on_device_(on_device),
        rows_(rows),
        d_(d),
        step_elems_(static_cast<std::size_t>(rows * d)),
        host_(on_device ? 0 : static_cast<std::size_t>(steps) * step_elems_),
        dev_(mem, on_device ? static_cast<std::size_t>(steps) * step_elems_ : step_elems_) {}

  // Step s's slab on the device (its values moved there first when they live on the host).
  View<float> load(std::int64_t s) {
    if (!on_device_) mem_->upload(dev_.data(), host_.data() + offset(s), step_elems_ * sizeof(float));
    return slot(s);
  }
  // Step s's slab on the device, to be written (then store(s)).
  View<float> slot(std::int64_t s) {
    return View<float>(dev_.data() + (on_device_ ? offset(s) : 0), Shape{rows_, d_});
  }
  // Step s's slot kept (moved to the host when the states live there).
  void store(std::int64_t s) {
    if (!on_device_) mem_->download(host_.data() + offset(s), dev_.data(), step_elems_ * sizeof(float));
  }
  void swap(HiddenStates& other) noexcept {
    std::swap(host_, other.host_);
    std::swap(dev_, other.dev_);
  }
  void release() {
    host_ = {};
    dev_ = {};
  }

 private:
  std::size_t offset(std::int64_t s) const { return static_cast<std::size_t>(s) * step_elems_; }
  Memory* mem_;
  bool on_device_;
  index_t rows_, d_;
  std::size_t step_elems_;
  std::vector<float> host_;
  Buffer<float> dev_;
};

class LayerwiseObjective final : public Objective {
 public:
  explicit LayerwiseObjective(bool sequential) : sequential_(sequential) {}

  index_t units(const CompressRun& run) const override { return run.cfg().num_layers; }
  std::string curve_label(std::size_t unit) const override { return fmt::format("block {}", unit); }
  std::string plot_title() const override {
    return sequential_ ? "sequential loss per block (student inputs)" : "layer-wise loss per block";
  }
  std::string loss_label() const override { return "MSE"; }

  void train(CompressRun& run) override {
    const CompressOptions& o = run.o;
    const index_t L = run.cfg().num_layers, d = run.cfg().hidden_size, rows = run.rows();
    const bool on_device = !run.streaming.stream && o.device_memory_cap == 0;
    Memory& mem = *run.be.memory;
    HiddenStates x(mem, on_device, o.steps, rows, d), y(mem, on_device, o.steps, rows, d);
    std::optional<HiddenStates> xs, xs_next;
    if (sequential_) {
      xs.emplace(mem, on_device, o.steps, rows, d);
      xs_next.emplace(mem, on_device, o.steps, rows, d);
    }
    for (std::int64_t s = 0; s < o.steps; ++s) {
      run.teacher->embed(run.ids_of_step(s), x.slot(s));
      x.store(s);
      if (xs) {
        run.teacher->embed(run.ids_of_step(s), xs->slot(s));
        xs->store(s);
      }
    }
    // Resume: the hidden states at first_block's input, as the first run computed them.
    for (index_t b = 0; b < run.first_block && b < L; ++b) {
      teacher_block(run, b, x, y);
      x.swap(y);
      if (xs) student_block_pass(run, b, *xs, *xs_next);
    }
    for (index_t b = run.first_block; b < L; ++b) {
      teacher_block(run, b, x, y);  // the targets: the teacher block on the teacher's inputs
      HiddenStates& input = xs ? *xs : x;
      if (run.hybrid()) {
        StudentHybridBlock<float> student(run.be, run.hybrid_teacher->block_dims(),
                                          hybrid_block_weights(run, b, run.init_blr), o.train.signs.optimizer, o.tau,
                                          sign_id(b));
        train_block(run, b, student, input, y, hybrid_bufs_);
      } else {
        StudentLlamaBlock<float> student(run.be, model::LlamaBlockDims::of(run.cfg()),
                                         llama_block_weights(run, b, run.init_blr), o.train.signs.optimizer, o.tau,
                                         sign_id(b));
        train_block(run, b, student, input, y, bufs_);
      }
      if (xs) student_block_pass(run, b, *xs, *xs_next);
      x.swap(y);  // the teacher's outputs are the next block's inputs
    }
    bufs_ = {};
    hybrid_bufs_ = {};
    acts_ = {};
    hybrid_acts_ = {};
  }

 private:
  static std::uint32_t sign_id(index_t b) { return static_cast<std::uint32_t>(b) * 64u; }

  // y = teacher block b on x, step by step.
  void teacher_block(CompressRun& run, index_t b, HiddenStates& x, HiddenStates& y) {
    for (std::int64_t s = 0; s < run.o.steps; ++s) {
      const View<float> in = x.load(s), out = y.slot(s);
      if (run.hybrid())  // inference only: no GDN tape
        run.hybrid_teacher->block_forward(b, in, run.o.seq_len, hybrid_acts_, out, false);
      else
        run.llama_teacher->block_forward(b, in, run.o.seq_len, acts_, out);
      y.store(s);
    }
  }

  // xs = trained student block b (from run.ckpt.trained) on xs, step by step.
  void student_block_pass(CompressRun& run, index_t b, HiddenStates& xs, HiddenStates& next) {
    const CompressOptions& o = run.o;
    const auto pass = [&](auto& student, auto& buffers) {
      for (std::int64_t s = 0; s < o.steps; ++s) {
        const View<float> in = xs.load(s), out = next.slot(s);
        student.forward(in, o.seq_len, buffers.tape, out);
        next.store(s);
      }
      xs.swap(next);
    };
    if (run.hybrid()) {
      StudentHybridBlock<float> student(
          run.be, run.hybrid_teacher->block_dims(),
          hybrid_block_weights(run, b, run.ckpt.trained, &run.ckpt.trained_gains), o.train.signs.optimizer, o.tau,
          sign_id(b));
      pass(student, hybrid_bufs_);
    } else {
      StudentLlamaBlock<float> student(run.be, model::LlamaBlockDims::of(run.cfg()),
                                       llama_block_weights(run, b, run.ckpt.trained, &run.ckpt.trained_gains),
                                       o.train.signs.optimizer, o.tau, sign_id(b));
      pass(student, bufs_);
    }
  }

  // Trains block b's student for its steps, on input → target.
  template <class Student>
  void train_block(CompressRun& run, index_t b, Student& student, HiddenStates& input, HiddenStates& target,
                   LayerwiseBuffersOf<Student>& buffers) {
    const CompressOptions& o = run.o;
    const GradScalerOptions scaler_options = layerwise_scaler_options(run.rows() * run.cfg().hidden_size);
    LayerwiseState state(scaler_options);
    std::int64_t s0 = 0;
    if (b == run.first_block && run.resumed)  // mid-block, or the scale carried into this block's start
      state.scaler = GradScaler(scaler_options, run.ckpt.trainer.scaler);
    else if (carried_)
      state.scaler = GradScaler(scaler_options, *carried_);
    if (b == run.first_block && run.first_step > 0) {
      student.upload_state(run.ckpt.student_state);
      run.ckpt.student_state = {};
      state.applied_steps = run.ckpt.trainer.applied_steps;
      s0 = run.first_step;
    } else {
      run.ckpt.blocks.emplace_back();
    }
    constexpr bool dense = std::is_same_v<Student, StudentLlamaBlock<float>>;  // the layer-wise hooks' family
    const std::int64_t base = b * o.steps;
    const auto step = [&](std::int64_t s, const LayerwiseOptions& opt) {
      const View<float> x = input.load(s), y = target.load(s);
      const double loss = forward_backward(student, x, y, o.seq_len, buffers, state);
      if constexpr (dense)
        if (o.hooks.after_backward) o.hooks.after_backward(student, base + s);
      const StepReport r = finish_step(student, loss, state, opt);
      return StepOutcome{.loss = r.loss, .grad_scale = r.grad_scale, .flips = r.flips, .skipped = r.skipped};
    };
    const auto done = [&] {  // the block is trained: into the model, and a checkpoint at the next block's start
      keep_block(run, b, student.download());
      // The next block starts at this one's final scale, not at the cap: the
      // blocks' errors grow with depth (SmolLM2: block MSE 0.5 → 270), so a
      // reset spent 3–4 of the cpu recipe's 30 steps a block halving it again.
      LayerwiseState next(scaler_options);
      next.scaler = GradScaler(scaler_options, GradScalerState{.log2_scale = state.scaler.state().log2_scale});
      carried_ = next.scaler.state();
      write_checkpoint(run, b + 1, 0, scaler_options, &next, {});
    };
    const auto checkpoint = [&](std::int64_t next) {
      write_checkpoint(run, b, next, scaler_options, &state, student.download_state());
    };
    const auto after = [&](const StepRecord& rec) {
      if constexpr (dense)
        if (o.hooks.after_step) o.hooks.after_step(student, rec);
    };
    run_steps(run, base, s0, step, done, checkpoint, after);
  }

  bool sequential_;
  std::optional<GradScalerState> carried_;  // the scale the previous block ended at
  LayerwiseBuffers<float> bufs_;
  LayerwiseBuffersOf<StudentHybridBlock<float>> hybrid_bufs_;
  model::BlockActivations<float> acts_;
  model::HybridBlockActivations<float> hybrid_acts_;
};

}  // namespace

std::unique_ptr<Objective> make_layerwise_objective(bool sequential) {
  return std::make_unique<LayerwiseObjective>(sequential);
}

}  // namespace bitrank::train
