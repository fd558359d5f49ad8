// The state of one `bitrank compress` run and the stages that share it
// (internal to src/train; the contract is include/bitrank/train/compress.hpp).
//
// compress() in compress.cpp reads top to bottom:
//   prepare  (compress_prepare.cpp)  checkpoint, teacher, text, windows, rank plan,
//                                    calibration statistics, initialisation, the
//                                    teacher's and the initialisation's perplexity;
//   train    (objective_*.cpp)       the Objective of the run (objective.hpp);
//   finish   (compress_finish.cpp)   assemble and save the model, read it back,
//                                    measure it, write the summary.
// Every stage reads and writes one CompressRun; nothing else crosses them.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bitrank/blr/accounting.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/model/projection.hpp"
#include "bitrank/train/calibration.hpp"
#include "bitrank/train/compress.hpp"
#include "bitrank/train/compress_checkpoint.hpp"
#include "bitrank/train/data.hpp"
#include "bitrank/train/layerwise.hpp"
#include "bitrank/train/report.hpp"
#include "bitrank/train/schedule.hpp"
#include "bitrank/train/streaming.hpp"
#include "bitrank/train/student_block.hpp"
#include "bitrank/train/student_hybrid_block.hpp"

namespace bitrank::train {

using CompressClock = std::chrono::steady_clock;
inline double seconds_since(CompressClock::time_point t) {
  return std::chrono::duration<double>(CompressClock::now() - t).count();
}

// The start of a run given --init: the file's BLR matrices and trained gains.
struct InitModel {
  std::map<std::string, blr::HostBlrMatrix> blr;
  std::map<std::string, std::vector<float>> gains;
};

struct Perplexity {
  double nll = 0, ppl = 0;
  std::int64_t windows = 0, tokens = 0;
  double seconds = 0;
};

struct CompressRun {
  CompressRun(const CompressOptions& options, Backend<float>& backend) : o(options), be(backend) {}

  const CompressOptions& o;
  Backend<float>& be;
  CompressClock::time_point t_start = CompressClock::now();

  // Checkpoint: `ckpt` is the run's state from the start on (what a checkpoint writes).
  std::filesystem::path ckpt_path, log_path, plot_path;
  CompressCheckpoint ckpt;
  bool resumed = false;
  index_t first_block = 0;       // where training continues: unit first_block, its step first_step
  std::int64_t first_step = 0;

  // Teacher and text.
  model::HostWeights weights;
  std::optional<InitModel> from;  // --init
  StreamChoice streaming;
  std::optional<io::Tokenizer> tokenizer;
  TrainingText train_text;
  std::vector<std::int32_t> eval_ids;
  std::int64_t eval_windows = 0;
  std::unique_ptr<model::DecoderModel<float>> teacher;
  const model::LlamaModel<float>* llama_teacher = nullptr;    // exactly one of these two is set
  const model::HybridModel<float>* hybrid_teacher = nullptr;

  // Training windows: every step's ids, [steps][rows], fixed up front.
  std::vector<std::int32_t> step_ids;
  DataPosition data;

  // Rank plan and initialisation.
  std::vector<blr::RankPlan> plan;
  std::vector<index_t> plan_block;  // the block of each plan entry
  ProjectionInputs inputs;  // calibration: per projection, rms of each input column (and the Gram with init gram)
  model::BlrProjections init_blr;   // the matrices still to train
  std::vector<double> init_error, init_output_error;  // per plan entry (output error: NaN without calibration)
  std::string svd_where;

  // The step loop's running totals.
  std::optional<StepLog> log;
  std::optional<TrainProgress> progress;
  StepRecord rec;
  double train_seconds = 0;
  LrScheduleOptions schedule;

  const io::ModelConfig& cfg() const { return weights.config; }
  bool hybrid() const { return cfg().is_hybrid(); }
  index_t rows() const { return o.windows_per_step * o.seq_len; }
  // Step s's ids.
  std::span<const std::int32_t> ids_of_step(std::int64_t s) const {
    return std::span<const std::int32_t>(step_ids).subspan(static_cast<std::size_t>(s * rows()),
                                                          static_cast<std::size_t>(rows()));
  }
};

class Objective;

// Stages (compress.cpp calls them in this order; `units` is the objective's).
void prepare_run(CompressRun& run);                          // checkpoint, teacher, text, windows
void plan_and_initialise(CompressRun& run, index_t units);   // ranks, calibration, init, starting perplexities
void start_training(CompressRun& run, index_t units);        // step log, progress, schedule
nlohmann::ordered_json finish_run(CompressRun& run, const Objective& objective);  // save, measure, summary
// Instead of training (--diagnose): perplexity with one block / one projection kind replaced (compress_diagnose.cpp).
nlohmann::ordered_json diagnose_initialisation(CompressRun& run);

// Perplexity over the first `windows` windows of `ids` (as `bitrank eval`).
Perplexity perplexity(const model::DecoderModel<float>& m, std::span<const std::int32_t> ids, index_t T,
                      std::int64_t windows, const char* what);
nlohmann::ordered_json ppl_json(const Perplexity& p);

// The norm gains a block's student trains, as (tensor name within the
// block, field) pairs: Llama attn/ffn norms; hybrid attn/post-attention
// norms and, in full-attention blocks, the q/k norms. e2e also trains the
// final norm (kFinalNorm).
template <class Weights>
auto trained_gains(Weights& w) {
  using Field = decltype(&w.attn_norm);
  std::vector<std::pair<const char*, Field>> g;
  if constexpr (std::is_same_v<std::remove_const_t<Weights>, StudentBlockWeights>) {
    g = {{"attn_norm.weight", &w.attn_norm}, {"ffn_norm.weight", &w.ffn_norm}};
  } else {
    g = {{"attn_norm.weight", &w.attn_norm}, {"post_attention_norm.weight", &w.post_norm}};
    if (w.full_attention) g.insert(g.end(), {{"attn_q_norm.weight", &w.q_norm}, {"attn_k_norm.weight", &w.k_norm}});
  }
  return g;
}
inline constexpr const char* kFinalNorm = "output_norm.weight";
std::vector<std::string> trained_gain_names(const io::ModelConfig& cfg, index_t b);
bool is_trained_gain(const std::string& name, const io::ModelConfig& cfg);

// Block b's student weights from `matrices` (init_blr, or ckpt.trained) and
// gains (the --init file's, else the teacher's; or ckpt.trained_gains).
StudentBlockWeights llama_block_weights(const CompressRun& run, index_t b, const model::BlrProjections& matrices,
                                        const std::map<std::string, std::vector<float>>* gains = nullptr);
StudentHybridWeights hybrid_block_weights(const CompressRun& run, index_t b, const model::BlrProjections& matrices,
                                          const std::map<std::string, std::vector<float>>* gains = nullptr);
// A trained block into ckpt.trained / ckpt.trained_gains.
void keep_block(CompressRun& run, index_t b, const StudentBlockWeights& w);
void keep_block(CompressRun& run, index_t b, const StudentHybridWeights& w);

// The run's learning rates at schedule multiplier `mult`.
LayerwiseOptions scheduled(const LayerwiseOptions& peak, double mult);

// Writes the checkpoint of unit `block` after `step` of its steps; `scaler`
// and `applied_steps` are that unit's (none: a fresh scaler of `scaler_options`).
void write_checkpoint(CompressRun& run, index_t block, std::int64_t step, const GradScalerOptions& scaler_options,
                      const LayerwiseState* state, std::vector<std::byte> student_state);

}  // namespace bitrank::train
