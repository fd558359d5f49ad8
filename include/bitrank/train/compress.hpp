// `bitrank compress`: a pretrained model — dense Llama family, or a Qwen3.5 /
// Qwen3-Next hybrid (GDN and gated attention blocks) — in, a trained BLR
// model (the bitrank format) out, with its perplexity measured (DESIGN §6,
// §7, §8, §9), by either objective.
//
// Stages, in order (src/train/compress.cpp reads them top to bottom):
//   1. prepare: teacher weights (GGUF or Hugging Face directory) and its
//      tokenizer; training ids from the training split of the corpus (or
//      --text), the evaluation split's first `eval_windows` windows for
//      perplexity; the training windows of every step, fixed up front
//      (train::TrainWindows, seeded);
//   2. plan and initialise: ranks by blr::plan_ranks over the family's
//      compressible projections (model::compressible_projections) at the
//      target bpw (honest bits, f16 scales); calibration statistics — the
//      rms of every projection's input columns, the teacher run over the
//      first `calib_windows` training windows (train/calibration.hpp); the
//      initialisation of each matrix (1 or 2 paths), one per pool thread,
//      the SVDs by `svd_engine`: init_method "act" is the activation-
//      weighted Dual-SVID (blr/init.hpp, column_scale: the weight error
//      weighted by those rms values, i.e. the output error), "gram" the
//      same with its refinement sweeps under each input's Gram XᵀX (the
//      whole output error, correlations included), "svid" the plain,
//      data-blind one; or the --init file's matrices. Then the
//      teacher's and the initialisation's perplexities;
//   3. train, by the objective (src/train/objective.hpp):
//      "layer"      block by block, the student block (StudentLlamaBlock;
//                   hybrid: StudentHybridBlock, its GDN b, a and core
//                   frozen) learns the teacher block's output from the
//                   teacher's hidden states at its input (MSE), `steps`
//                   train_step calls a block, warmup + cosine on every rate;
//      "sequential" the same targets from the hidden states of the student
//                   blocks already trained (each block learns to correct the
//                   error accumulated before it, as GPTQ-style methods do);
//      "e2e"        every block at once (train/e2e.hpp: KL(teacher ‖ student)
//                   on the logits over vocabulary slices + (λ/T)·Σ
//                   block-output MSE), `steps` steps; the final gain trains too;
//   4. finish: the model saved (scales f16, dense tensors f16), read back,
//      its perplexity measured from the file as a user gets it; a JSON-lines
//      step log, an SVG of the loss curves, and a summary (ranks, bpw and
//      init errors per matrix and for the model, file size, time, tokens/s,
//      peak device memory, perplexities) stored in the file's metadata and
//      returned.
//
// Checkpoints (compress_checkpoint.hpp has the file's layout): every
// `checkpoint_every` steps (counted over the whole run) and at the end of
// every block, `<out>.ckpt` is written atomically. With `resume` the run
// reads it, checks that its objective, the options and the training data
// are the checkpoint's (Error naming the first difference), recomputes what is
// deterministic — the rank plan, the Dual-SVID initialisation of the blocks
// still to train (checked against the stored fingerprints) and the
// teacher's hidden states at the current block's input (the teacher blocks
// before it run again over the same windows) — restores the trained blocks,
// the current student block's parameters and optimizer state, its step,
// applied-step count, grad scaler and the run's totals, cuts the step log
// back to the checkpoint's step, and continues: the losses (and the saved
// tensors) equal the uninterrupted run's bit for bit on the same backend.
// The end-to-end objective is one block in this scheme: its checkpoint
// holds the whole student's state (every block, the final gain, their
// optimizer state) every `checkpoint_every` steps and the trained model at
// the end; a resume recomputes the initialisation of every block (checked
// against the fingerprints) and restores the student, its applied steps,
// grad scaler and the totals — no teacher block runs again, as the e2e
// step runs the teacher itself.
// The teacher's and the initialisation's perplexities come from the
// checkpoint. After the model file is saved the checkpoint is deleted. A
// fresh run (no `resume`) that finds a checkpoint is an Error, so a
// forgotten --resume never discards one; `resume` without one is an Error.
//
// Streaming and the device-memory cap (train/streaming.hpp): under a cap
// the backend's memory refuses to hold more (an Error naming the cap, what
// is held and the request); with streaming (--stream, or automatic when
// the teacher's weights alone exceed the cap) every model of the run — the
// teacher, the initialisation and the trained student measured for
// perplexity — keeps its blocks in host memory and moves them to two
// device slots one at a time, and the e2e student (either family) streams
// its blocks' whole training state the same way — its checkpoints read and
// write the blocks through the slots, so a streamed run stops and resumes
// bit for bit as a resident one does. The layer-wise objective then holds
// on the device two teacher blocks, one student block, the head and one
// step's windows; the results equal the resident run's bit for bit. The
// summary records the cap, whether the run streamed and why, and the peak
// device memory. The cap and the peak are the backend's memory's: the GPU
// SVD engine (`svd_engine`) has its own, used during the initialisation
// only (before any model is on the device) and emptied after every SVD.
//
// Throughput is counted as block-tokens: each step pushes
// windows_per_step·seq_len tokens through one block (forward, backward,
// updates); tokens_per_s is block-tokens per second of training, and
// model_tokens_per_s that divided by the number of blocks (tokens through
// the whole model per second).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "bitrank/backend.hpp"
#include "bitrank/blr/accounting.hpp"
#include "bitrank/svd_engine.hpp"
#include "bitrank/train/compress_checkpoint.hpp"
#include "bitrank/train/e2e.hpp"
#include "bitrank/train/layerwise.hpp"
#include "bitrank/train/report.hpp"

namespace bitrank::train {

// Test hooks, called with the global 0-based step (layer-wise: block·steps
// + step in block). after_backward sees the step's gradients before its
// update (a test may poison one); after_step runs once the step is logged
// and its checkpoint, if one is due, written (a test may read the state, or
// throw to stop the run as a kill would). Those two see a Llama student
// block and run for the dense family's layer-wise objective only; their
// e2e_ twins see the whole e2e student and run for the dense family's e2e
// objective only; on_step runs after them for either family and objective
// (a test may throw there to stop a hybrid run).
struct CompressHooks {
  std::function<void(StudentLlamaBlock<float>&, std::int64_t step)> after_backward;
  std::function<void(const StudentLlamaBlock<float>&, const StepRecord&)> after_step;
  std::function<void(E2eTrainer<float>&, std::int64_t step)> e2e_after_backward;
  std::function<void(const E2eTrainer<float>&, const StepRecord&)> e2e_after_step;
  std::function<void(const StepRecord&)> on_step;
};

struct CompressOptions {
  std::filesystem::path model;    // .gguf or Hugging Face directory (dense Llama family or hybrid)
  std::filesystem::path out;      // the .bitrank file to write
  std::vector<std::filesystem::path> texts;  // training text: files, directories, JSONL (train/data.hpp); empty: the corpus training split
  // Text sampled from the teacher (train/teacher_text.hpp, cached in <out>.teacher.ids):
  // data "text" trains on `texts` with a teacher_share of the windows from the teacher's samples (0: none);
  // data "teacher" trains on the teacher's samples alone.
  std::string data = "text";
  double teacher_share = 0;
  std::int64_t teacher_tokens = 131072;
  std::filesystem::path eval_text;  // perplexity text; empty: the corpus evaluation split
  std::string objective = "layer";   // layer, sequential or e2e (see above)
  std::string init_method = "svid";  // svid (plain Dual-SVID), act (activation-weighted Dual-SVID) or gram (act, refined under the input Grams)
  std::int64_t calib_windows = 16;   // training windows the calibration statistics run over (0: none; svid only)
  int init_refine = 0;               // sweeps of the exact sign/scale refinement after Dual-SVID (blr/refine.hpp)
  int init_rotate = 0;               // ITQ rounds of the latent rotation before Dual-SVID's sign split (blr/init.hpp; 0: none)
  double bpw = 1.0;               // target bits per weight over the projections
  int paths = 2;                  // 1, or 2 (residual path)
  std::vector<blr::BpwOverride> bpw_overrides;  // per-projection targets (blr::plan_ranks), first match wins
  // How the bits are spread when no bpw_overrides are given: "uniform" (every
  // projection at bpw) or "front" (blocks 0 and 1 at twice bpw, capped at
  // what their ranks can use; the rest lower, so the whole stays at bpw).
  std::string allocation = "uniform";
  // A compressed model of the same teacher (a .bitrank) to start from
  // instead of Dual-SVID: its matrices (ranks, paths, scales, signs) and its
  // dense tensors (trained gains) are the student at step 0 — e.g. the e2e
  // objective after a layer-wise run. bpw and bpw_overrides are then not
  // used (the ranks are the file's). Empty: Dual-SVID at the planned ranks.
  std::filesystem::path init;
  bool diagnose = false;             // measure the initialisation (one block / projection kind replaced), train nothing
  std::int64_t max_text_tokens = 0;  // distinct training tokens read from the text (its start; 0: all of it)
  std::int64_t steps = 16;        // training steps per block (layer); steps in all (e2e)
  // compress_recipe only: after a block-wise objective, this many end-to-end
  // steps from its result (0: none), at sign rate e2e_sign_lr.
  std::int64_t e2e_steps = 0;
  float e2e_sign_lr = 1e-4f;
  std::int64_t seq_len = 256;     // T
  std::int64_t windows_per_step = 4;
  std::int64_t eval_windows = 16; // perplexity windows of the evaluation split (0: all)
  bool eval_init = true;          // also the start's perplexity (before training); the summary's "init" is null without it
  std::int64_t eval_seq_len = 512;
  std::uint64_t seed = 0;
  float tau = 0.25f;              // sign latents start at ±tau
  double warmup_fraction = 0.1;   // of each block's steps
  LayerwiseOptions train{};       // learning rates (peaks), sign optimizer, clipping
  double mse_weight = 10.0;       // e2e: λ of the hidden-state MSE terms (weighted λ/T, train/e2e.hpp)
  std::string device = "cpu";     // for the summary
  SvdEngine svd_engine{};         // the Dual-SVID SVDs; empty: the CPU (the CLI gives --device cuda the GPU's)
  std::string svd_label;          // where svd_engine runs, for the log and summary (empty: "GPU" when set)
  std::int64_t checkpoint_every = 50;  // steps between checkpoints; 0: only at the end of each block
  bool resume = false;            // continue from <out>.ckpt
  std::string stream = "auto";    // auto, on, off: blocks streamed from host memory (train/streaming.hpp)
  std::size_t device_memory_cap = 0;  // bytes the backend's memory may hold (0: no cap)
  CompressHooks hooks{};          // tests only
};

// Checks every option (Error naming it).
void validate(const CompressOptions& options);

// The options a user set (on the command line); apply_recipe_defaults
// leaves those alone.
struct GivenOptions {
  bool objective = false, init_method = false, calib_windows = false, max_text_tokens = false;
  bool seq_len = false, windows = false, steps = false, lr = false, sign_lr = false, e2e_steps = false;
  bool allocation = false, init_refine = false, eval_init = false, init_rotate = false;
};

// The defaults that depend on the device, the method and the objective, set
// here and nowhere else (docs/results.md has the sweeps behind them):
//   method "train" (the default): the activation-weighted init, then the
//     sequential objective over the whole text (then, on cuda, e2e_steps);
//   method "ptq" (post-training): the same init, objective and stages over
//     a calibration set of at most 262,144 tokens on cuda (as NanoQuant's
//     128 windows of 2048; the end-to-end stage too), 32,768 on cpu;
//   measured on SmolLM2-135M at 1.0 bpw, 409,600 tokens a block (H100, 64
//     windows): layer 3,081, sequential 383.2, the same from the
//     activation-weighted init 357.4 — hence those two defaults; at
//     4,096,000 a block (1000 steps) 53.9, then 600 e2e steps 33.6; ptq
//     (H200) 355.6 at 100 steps, 59.1 at 1000, 39.2 with the e2e stage;
//   device cuda: windows of 512, 8 a step, 1000 steps (layer-wise: per block),
//     then 600 end-to-end steps (e2e_steps), 64 calibration windows; cpu:
//     windows of 256, 4 a step, 30 steps (the README's main job: 8.4 min on
//     the 2-core machine), no e2e stage; 64 calibration windows on both
//     (cpu, gram: 16 windows 123.8, 32 92.3, 64 87.0);
//   peak rates: BLR scales 1e-2; sign latents 1e-2 for the block-wise
//     objectives, 1e-4 for e2e (1e-2 undoes a layer-wise start there);
//   allocation: "front" on cpu from 1.0 bpw (the README's main job: 4,231
//     → 2,021; the first two blocks carry most of the initialisation's
//     damage), "uniform" below (at 0.55 front gave 2,649 against 2,313)
//     and on cuda (front not yet measured at its budget);
//   init_refine: 8 sweeps of blr/refine.hpp after the activation-weighted
//     Dual-SVID, on both devices (the README's main job: none 2,021, 4
//     sweeps 168.2, 8 146.0, 16 138.4 at 1 more minute; cuda, H100: the
//     block-wise stage 53.9 → 37.5);
//   init_rotate: 12 ITQ rounds on both devices (the README's main job at 40
//     steps and 20 rounds: 85.05 → 66.47, the start 5,505 → 432; cuda, H100:
//     the block-wise stage 37.46 → 33.20 at 12 rounds);
//   eval_init: on cuda only (on cpu the start's perplexity is 18 s of the
//     README's 10-minute main job, and says nothing about the result);
//   init_method: "gram" on cpu when there are sweeps (under the input Grams:
//     the README's main job 146.0 → 123.8 at 8 sweeps and 16 calibration
//     windows, 129.8 at 4), "act" on cuda (its block-wise stage: act 37.5, gram 38.7) and
//     without sweeps.
// Error for a method other than train or ptq.
void apply_recipe_defaults(CompressOptions& options, std::string_view method, const GivenOptions& given);

// The ranks of `matrices` (compressible_projections) for o.bpw: planned
// with o.bpw_overrides when given, else by o.allocation — "front" plans
// the matrices of blocks 0 and 1 at twice o.bpw (at most what their ranks
// can use and what leaves the others rank 32; never below o.bpw) and the
// rest so that the whole is o.bpw; models where blocks 0 and 1 hold more
// than a quarter of the weights are planned uniform. blr::plan_ranks's errors.
std::vector<blr::RankPlan> plan_ranks_for(const CompressOptions& o, std::vector<blr::RankPlan> matrices);

// Runs the whole job on `be`; returns the summary (also stored in the file).
nlohmann::ordered_json compress(const CompressOptions& options, Backend<float>& be);

// compress, then (when e2e_steps > 0 after a block-wise objective) the
// end-to-end objective for e2e_steps steps from its result: the block-wise
// stage writes <out>.blockwise.bitrank (deleted at the end), the e2e stage
// <out>. Each stage checkpoints and resumes as compress does; with `resume`
// the stage whose checkpoint exists continues (a finished block-wise file
// and no e2e checkpoint: the e2e stage starts). The summary is the e2e
// stage's with "stages": the block-wise stage's perplexity and training.
nlohmann::ordered_json compress_recipe(const CompressOptions& options, Backend<float>& be);

}  // namespace bitrank::train
