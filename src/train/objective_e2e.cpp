// The end-to-end objective (objective.hpp): every block at once from the
// initialisation, KL on the logits + (λ/T)·Σ block MSE (train/e2e.hpp:
// E2eTrainer over StudentLlamaBlock, HybridE2eTrainer over
// StudentHybridBlock with its GDN b, a and core frozen), `steps` steps over
// the same windows the layer-wise objectives use; the final norm gain trains
// too. One training unit: one log entry per step, the curve is the whole
// model's loss. Checkpoints every checkpoint_every steps (the whole
// student's state) and when done (the trained model); a resume of a
// finished run goes straight to the save. No teacher block runs again on
// resume: the e2e step runs the teacher itself.
#include "bitrank/train/e2e.hpp"

#include "train/objective.hpp"

namespace bitrank::train {
namespace {

class E2eObjective final : public Objective {
 public:
  index_t units(const CompressRun&) const override { return 1; }
  std::string curve_label(std::size_t) const override { return "KL + (λ/T)·hidden MSE"; }
  std::string plot_title() const override { return "end-to-end loss"; }
  std::string loss_label() const override { return "KL + (λ/T)·MSE"; }

  void train(CompressRun& run) override {
    if (run.first_block > 0) return;  // trained before the resume: straight to the save
    const CompressOptions& o = run.o;
    const index_t L = run.cfg().num_layers;
    const E2eOptions options{o.train, o.mse_weight};
    const GradScalerOptions scaler = e2e_scaler_options(run.rows());
    if (run.hybrid()) {
      HybridE2eStudentWeights w;
      for (index_t b = 0; b < L; ++b) w.blocks.push_back(hybrid_block_weights(run, b, run.init_blr));
      if (run.from) w.final_norm = start_final_norm(run);  // else the teacher's
      HybridE2eTrainer<float> trainer(*run.hybrid_teacher, w, scaler, options, o.train.signs.optimizer, o.tau,
                                      run.streaming.stream);
      train_all(run, trainer, scaler);
    } else {
      E2eStudentWeights w;
      for (index_t b = 0; b < L; ++b) w.blocks.push_back(llama_block_weights(run, b, run.init_blr));
      if (run.from) w.final_norm = start_final_norm(run);
      E2eTrainer<float> trainer(*run.llama_teacher, w, scaler, options, o.train.signs.optimizer, o.tau,
                                run.streaming.stream);
      train_all(run, trainer, scaler);
    }
  }

 private:
  // The --init file's final norm when it has one, else the teacher's.
  static std::vector<float> start_final_norm(const CompressRun& run) {
    if (const auto it = run.from->gains.find(kFinalNorm); it != run.from->gains.end()) return it->second;
    return run.weights.at(kFinalNorm).values;
  }

  template <class Student>
  void train_all(CompressRun& run, E2eTrainerOf<Student>& trainer, const GradScalerOptions& scaler) {
    const CompressOptions& o = run.o;
    constexpr bool dense = std::is_same_v<Student, StudentLlamaBlock<float>>;  // the e2e_ hooks' family
    if (run.first_step > 0) {
      trainer.upload_state(run.ckpt.student_state);
      run.ckpt.student_state = {};
      trainer.state().applied_steps = run.ckpt.trainer.applied_steps;
      trainer.state().scaler = GradScaler(scaler, run.ckpt.trainer.scaler);
    } else {
      run.ckpt.blocks.emplace_back();
    }
    const auto step = [&](std::int64_t s, const LayerwiseOptions& opt) {
      trainer.options().optim = opt;
      const E2eLoss loss = trainer.forward_backward(run.ids_of_step(s), o.seq_len);
      if constexpr (dense)
        if (o.hooks.e2e_after_backward) o.hooks.e2e_after_backward(trainer, s);
      const E2eReport r = trainer.finish_step(loss);
      return StepOutcome{.loss = r.loss.total,
                         .grad_scale = r.step.grad_scale,
                         .flips = r.step.flips,
                         .skipped = r.step.skipped,
                         .block_loss = {r.loss.kl, r.loss.mse}};
    };
    const auto done = [&] {  // trained: into the model, and the checkpoint of a finished run
      const auto w = trainer.download();
      for (index_t b = 0; b < run.cfg().num_layers; ++b) keep_block(run, b, w.blocks[static_cast<std::size_t>(b)]);
      run.ckpt.trained_gains[kFinalNorm] = w.final_norm;
      write_checkpoint(run, 1, 0, scaler, nullptr, {});
    };
    const auto checkpoint = [&](std::int64_t next) {
      write_checkpoint(run, 0, next, scaler, &trainer.state(), trainer.download_state());
    };
    const auto after = [&](const StepRecord& rec) {
      if constexpr (dense)
        if (o.hooks.e2e_after_step) o.hooks.e2e_after_step(trainer, rec);
    };
    run_steps(run, 0, run.first_step, step, done, checkpoint, after);
  }
};

}  // namespace

std::unique_ptr<Objective> make_e2e_objective() { return std::make_unique<E2eObjective>(); }

std::unique_ptr<Objective> make_objective(const std::string& name) {
  if (name == "e2e") return make_e2e_objective();
  return make_layerwise_objective(name == "sequential");
}

}  // namespace bitrank::train
