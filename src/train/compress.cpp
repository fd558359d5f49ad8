// `bitrank compress` (contract: include/bitrank/train/compress.hpp): the
// run read top to bottom, and what its stages share (compress_run.hpp).
// The stages live in compress_prepare.cpp (checkpoint, teacher, data, rank
// plan, calibration, initialisation), objective_layerwise.cpp and
// objective_e2e.cpp (training), compress_finish.cpp (save and measure).
#include "bitrank/train/compress.hpp"

#include <fmt/format.h>

#include <cmath>

#include "bitrank/error.hpp"
#include "bitrank/log.hpp"
#include "bitrank/progress.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "train/objective.hpp"

namespace bitrank::train {

nlohmann::ordered_json compress(const CompressOptions& o, Backend<float>& be) {
  validate(o);
  const DeviceMemoryCap cap(*be.memory, o.device_memory_cap);
  be.memory->reset_peak();
  CompressRun run(o, be);
  const std::unique_ptr<Objective> objective = make_objective(o.objective);
  prepare_run(run);                                     // 1. checkpoint, teacher, text, training windows
  const index_t units = objective->units(run);
  plan_and_initialise(run, units);                      // 2. ranks, calibration, initialisation, perplexities
  if (o.diagnose) return diagnose_initialisation(run);  //    (or where the initialisation's error comes from)
  start_training(run, units);                           // 3. step log, progress, schedule
  objective->train(run);                                //    the objective's steps, checkpoints on the way
  run.progress->finish();
  return finish_run(run, *objective);                   // 4. save, read back, measure, summary
}

void apply_recipe_defaults(CompressOptions& o, std::string_view method, const GivenOptions& given) {
  if (method != "train" && method != "ptq") fail("compress: method '{}' is not one of train, ptq", method);
  const bool cuda = o.device == "cuda", ptq = method == "ptq";
  if (!given.objective) o.objective = "sequential";
  if (!given.seq_len) o.seq_len = cuda ? 512 : 256;
  if (!given.windows) o.windows_per_step = cuda ? 8 : 4;
  // cpu: 30 steps and 12 ITQ rounds keep the README's main job under 10 minutes on a slow hour of the
  // 2-core machine (8 min 28 s, 80.84; 40 steps and 20 rounds: 66.47 in 9 min 34 s to 11 min 20 s).
  if (!given.steps) o.steps = cuda ? 1000 : 30;
  // 64 windows of 256 on cpu (16 384 tokens): the Grams' fit, 123.8 at 16 → 92.3 at 32 → 87.0 (docs/results.md).
  if (!given.calib_windows) o.calib_windows = 64;
  if (!given.max_text_tokens && ptq) o.max_text_tokens = cuda ? 262144 : 32768;
  if (!given.lr) o.train.scales.lr = 1e-2f;
  if (!given.sign_lr) o.train.signs.lr = o.objective == "e2e" ? 1e-4f : 1e-2f;
  if (!given.init_refine) o.init_refine = o.init.empty() ? 8 : 0;  // --init: the file's matrices, no Dual-SVID
  // The Gram-weighted refinement: 15 % lower perplexity at the cpu budget; no
  // gain at cuda's 25× larger one (docs/results.md), where act is cheaper.
  if (!given.init_method) o.init_method = !cuda && o.init_refine > 0 ? "gram" : "act";
  if (!given.allocation) o.allocation = !cuda && o.bpw >= 1.0 ? "front" : "uniform";
  // ITQ rotation before the sign split: cpu 85.05 → 66.47 at 40 steps; cuda's block-wise stage 37.46 → 33.20
  // (docs/results.md).
  if (!given.init_rotate) o.init_rotate = o.init.empty() ? 12 : 0;
  if (!given.eval_init) o.eval_init = cuda;  // 18 s of the cpu main job's 10 minutes
  if (!given.e2e_steps) o.e2e_steps = cuda && o.objective != "e2e" ? 600 : 0;  // ptq: over the calibration set
}

std::vector<blr::RankPlan> plan_ranks_for(const CompressOptions& o, std::vector<blr::RankPlan> matrices) {
  constexpr int kScaleBits = 16;
  std::vector<blr::BpwOverride> overrides = o.bpw_overrides;
  const auto front = [](const std::string& name) { return name.starts_with("blk.0.") || name.starts_with("blk.1."); };
  std::int64_t all = 0, front_weights = 0, rest_min_bits = 0;
  for (const blr::RankPlan& p : matrices) {
    const std::int64_t w = static_cast<std::int64_t>(p.m) * p.n;
    all += w;
    if (front(p.name)) front_weights += w;
    else rest_min_bits += blr::blr_bits(p.m, p.n, 32, o.paths, kScaleBits);
  }
  // Only where the other blocks can pay (at least three quarters of the
  // weights), and never so far that they fall below rank 32.
  if (overrides.empty() && o.allocation == "front" && 4 * front_weights <= all) {
    const double most = (o.bpw * static_cast<double>(all) - static_cast<double>(rest_min_bits)) /
                        static_cast<double>(front_weights) * 0.98;
    for (const std::string block : {"blk.0.", "blk.1."}) {
      std::int64_t bits = 0, weights = 0;  // the block's bits with every rank at its cap
      for (const blr::RankPlan& p : matrices)
        if (p.name.starts_with(block)) {
          bits += blr::blr_bits(p.m, p.n, blr::max_useful_rank(p.m, p.n), o.paths, kScaleBits);
          weights += static_cast<std::int64_t>(p.m) * p.n;
        }
      const double target = std::min({2.0 * o.bpw, static_cast<double>(bits) / static_cast<double>(weights), most});
      if (target > o.bpw) overrides.push_back({block, target});
    }
  }
  return blr::plan_ranks(std::move(matrices), o.bpw, overrides, o.paths, kScaleBits);
}

nlohmann::ordered_json compress_recipe(const CompressOptions& o, Backend<float>& be) {
  if (o.e2e_steps == 0 || o.objective == "e2e" || o.diagnose) return compress(o, be);
  namespace fs = std::filesystem;
  CompressOptions first = o;
  first.out = o.out.string() + ".blockwise.bitrank";
  CompressOptions second = o;
  second.objective = "e2e";
  second.steps = o.e2e_steps;
  second.train.signs.lr = o.e2e_sign_lr;
  second.init = first.out;
  second.init_refine = 0;  // the block-wise file's matrices: refined (if asked) before that stage trained
  second.init_rotate = 0;  // and rotated (if asked)
  second.bpw_overrides = {};  // the ranks are the block-wise file's
  second.eval_init = false;   // its start is the block-wise stage's student, measured there
  const bool second_started = fs::exists(compress_checkpoint_path(second.out));
  const bool first_done = fs::exists(first.out) && !fs::exists(compress_checkpoint_path(first.out));
  nlohmann::ordered_json stage1;
  if (o.resume && (second_started || first_done)) {
    if (!fs::exists(first.out))
      fail("compress --resume: the end-to-end stage's checkpoint {} exists but its start {} does not",
           compress_checkpoint_path(second.out).string(), first.out.string());
    stage1 = store::load_bitrank(first.out).summary;
    BR_LOG_INFO("compress: the block-wise stage is done ({}); the end-to-end stage {}", first.out.string(),
                second_started ? "resumes" : "starts");
  } else {
    first.resume = o.resume && fs::exists(compress_checkpoint_path(first.out));
    stage1 = compress(first, be);
  }
  second.resume = o.resume && second_started;
  nlohmann::ordered_json summary = compress(second, be);
  nlohmann::ordered_json blockwise = {{"objective", o.objective},
                                      {"steps_per_block", o.steps},
                                      {"perplexity", stage1.at("perplexity")}};
  if (stage1.contains("training")) blockwise["training"] = stage1.at("training");
  summary["stages"] = nlohmann::ordered_json::array({blockwise});
  summary["perplexity"]["init"] = stage1.at("perplexity").at("init");        // the run's start: the block-wise stage's
  summary["perplexity"]["blockwise"] = stage1.at("perplexity").at("student");
  fs::remove(first.out);
  return summary;
}

void validate(const CompressOptions& o) {
  if (o.model.empty()) fail("compress: no --model given and no default model was found when bitrank was built");
  if (o.out.empty()) fail("compress: no output file (-o) given");
  if (o.objective != "layer" && o.objective != "sequential" && o.objective != "e2e")
    fail("compress: objective '{}' is not one of layer, sequential, e2e", o.objective);
  if (o.allocation != "uniform" && o.allocation != "front")
    fail("compress: allocation '{}' is not one of uniform, front", o.allocation);
  if (o.init_method != "act" && o.init_method != "gram" && o.init_method != "svid")
    fail("compress: init method '{}' is not one of act (activation-weighted Dual-SVID), gram (act, refined under the "
         "inputs' Gram), svid (plain Dual-SVID)",
         o.init_method);
  if (o.diagnose && o.resume) fail("compress: --diagnose trains nothing and has nothing to resume");
  if (o.data != "text" && o.data != "teacher")
    fail("compress: --data '{}' is not one of text (the training text), teacher (text sampled from the teacher)",
         o.data);
  if (o.data == "teacher" && !o.texts.empty())
    fail("compress: --data teacher trains on the teacher's samples alone; --text does not apply (use --teacher-share "
         "to mix them with a text)");
  if (!(o.teacher_share >= 0 && o.teacher_share <= 1))
    fail("compress: --teacher-share must be in [0, 1], got {}", o.teacher_share);
  if (o.teacher_tokens < 1) fail("compress: --teacher-tokens must be positive, got {}", o.teacher_tokens);
  if (o.max_text_tokens < 0)
    fail("compress: --max-text-tokens must be 0 (the whole text) or positive, got {}", o.max_text_tokens);
  if (o.calib_windows < 0) fail("compress: --calib-windows must be 0 (none) or positive, got {}", o.calib_windows);
  if (o.init_method != "svid" && o.calib_windows == 0 && o.init.empty())
    fail("compress: the activation-weighted init (--init-method {}) needs calibration windows (--calib-windows > 0)",
         o.init_method);
  if (o.init_method == "gram" && o.init_refine == 0 && o.init.empty())
    fail("compress: --init-method gram refines under the inputs' Gram; with --init-refine 0 there is nothing to refine "
         "(use --init-method act)");
  if (!(std::isfinite(o.mse_weight) && o.mse_weight >= 0))
    fail("compress: the hidden-state MSE weight must be finite and ≥ 0, got {}", o.mse_weight);
  if (!(std::isfinite(o.bpw) && o.bpw > 0 && o.bpw <= 16)) fail("compress: --bpw must be in (0, 16], got {}", o.bpw);
  if (o.paths != 1 && o.paths != 2) fail("compress: --paths must be 1 or 2, got {}", o.paths);
  if (o.steps < 1) fail("compress: --steps must be at least 1, got {}", o.steps);
  if (o.seq_len < 2) fail("compress: --seq-len must be at least 2, got {}", o.seq_len);
  if (o.windows_per_step < 1) fail("compress: --windows must be at least 1, got {}", o.windows_per_step);
  if (o.eval_windows < 0) fail("compress: --eval-windows must be 0 (all) or positive, got {}", o.eval_windows);
  if (o.eval_seq_len < 2) fail("compress: --eval-seq-len must be at least 2, got {}", o.eval_seq_len);
  if (!(std::isfinite(o.tau) && o.tau > 0)) fail("compress: tau must be positive, got {}", o.tau);
  if (o.init_refine < 0 || o.init_refine > 100)
    fail("compress: --init-refine {} is not a number of sweeps from 0 to 100", o.init_refine);
  if (o.init_refine > 0 && !o.init.empty())
    fail("compress: --init-refine refines the Dual-SVID start; with --init {} the matrices are the file's (drop one of them)",
         o.init.string());
  if (o.init_rotate < 0 || o.init_rotate > 1000)
    fail("compress: --init-rotate {} is not a number of rotation rounds from 0 to 1000", o.init_rotate);
  if (o.init_rotate > 0 && !o.init.empty())
    fail("compress: --init-rotate rotates the Dual-SVID start; with --init {} the matrices are the file's (drop one of them)",
         o.init.string());
  check_stream_mode(o.stream, "compress");
  if (o.checkpoint_every < 0)
    fail("compress: --checkpoint-every must be 0 (block ends only) or positive, got {}", o.checkpoint_every);
  if (!(o.warmup_fraction >= 0 && o.warmup_fraction < 1))
    fail("compress: warmup fraction must be in [0, 1), got {}", o.warmup_fraction);
  const std::filesystem::path dir = o.out.has_parent_path() ? o.out.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(dir)) fail("compress: the output folder {} does not exist", dir.string());
  if (!o.init.empty()) {
    if (!std::filesystem::is_regular_file(o.init)) fail("compress: the --init file {} does not exist", o.init.string());
    if (std::filesystem::exists(o.out) && std::filesystem::equivalent(o.init, o.out))
      fail("compress: --init and -o name the same file {} (the run would overwrite its own start)", o.out.string());
  }
}


Perplexity perplexity(const model::DecoderModel<float>& m, std::span<const std::int32_t> ids, index_t T,
                      std::int64_t windows, const char* what) {
  const auto t0 = CompressClock::now();
  const index_t per_call = 4;
  double sum = 0;
  std::int64_t count = 0;
  ProgressLine progress;
  for (index_t w = 0; w < windows; w += per_call) {
    const index_t k = std::min<index_t>(per_call, windows - w);
    const auto r = m.nll(ids.subspan(static_cast<std::size_t>(w * T), static_cast<std::size_t>(k * T)), T);
    sum += r.sum;
    count += r.count;
    progress.update(fmt::format("eval {}: window {}/{}  ppl {:.3f}", what, w + k, windows, std::exp(sum / count)));
  }
  Perplexity p{sum / static_cast<double>(count), std::exp(sum / static_cast<double>(count)), windows, windows * T,
               seconds_since(t0)};
  progress.finish(fmt::format("eval {}: {} windows of {}  ppl {:.3f}  ({:.1f} s)", what, windows, T, p.ppl, p.seconds));
  return p;
}

nlohmann::ordered_json ppl_json(const Perplexity& p) {
  return {{"ppl", p.ppl}, {"nll", p.nll}, {"windows", p.windows}, {"tokens", p.tokens}, {"seconds", p.seconds}};
}

std::vector<std::string> trained_gain_names(const io::ModelConfig& cfg, index_t b) {
  std::vector<std::string> names;
  const auto add = [&](auto& w) {
    for (const auto& [name, field] : trained_gains(w)) names.push_back(fmt::format("blk.{}.{}", b, name));
  };
  if (cfg.is_hybrid()) {
    StudentHybridWeights w;
    w.full_attention = cfg.layer_types.at(static_cast<std::size_t>(b)) == io::LayerType::full_attention;
    add(w);
  } else {
    StudentBlockWeights w;
    add(w);
  }
  return names;
}

bool is_trained_gain(const std::string& name, const io::ModelConfig& cfg) {
  if (name == kFinalNorm) return true;
  for (index_t b = 0; b < cfg.num_layers; ++b)
    if (std::ranges::count(trained_gain_names(cfg, b), name) > 0) return true;
  return false;
}

namespace {
// A trained gain: from `gains` when given, else at step 0 (the --init file's, or the teacher's).
std::vector<float> gain_of(const CompressRun& run, const std::string& name,
                           const std::map<std::string, std::vector<float>>* gains) {
  if (gains) return gains->at(name);
  if (run.from)
    if (const auto it = run.from->gains.find(name); it != run.from->gains.end()) return it->second;
  return run.weights.at(name).values;
}
}  // namespace

StudentBlockWeights llama_block_weights(const CompressRun& run, index_t b, const model::BlrProjections& matrices,
                                        const std::map<std::string, std::vector<float>>* gains) {
  const std::string prefix = fmt::format("blk.{}.", b);
  StudentBlockWeights w;
  for (model::LlamaProj p : model::kAllLlamaProjs)
    w.proj[static_cast<std::size_t>(p)] = matrices.at(prefix + model::llama_proj_name(p));
  for (auto [name, field] : trained_gains(w)) *field = gain_of(run, prefix + name, gains);
  return w;
}

StudentHybridWeights hybrid_block_weights(const CompressRun& run, index_t b, const model::BlrProjections& matrices,
                                          const std::map<std::string, std::vector<float>>* gains) {
  const std::string prefix = fmt::format("blk.{}.", b);
  StudentHybridWeights w = hybrid_student_weights(run.weights, b, matrices);
  if (gains || run.from)
    for (auto [name, field] : trained_gains(w)) *field = gain_of(run, prefix + name, gains);
  return w;
}

void keep_block(CompressRun& run, index_t b, const StudentBlockWeights& w) {
  const std::string prefix = fmt::format("blk.{}.", b);
  for (model::LlamaProj p : model::kAllLlamaProjs)
    run.ckpt.trained[prefix + model::llama_proj_name(p)] = w.proj[static_cast<std::size_t>(p)];
  for (auto [name, field] : trained_gains(w)) run.ckpt.trained_gains[prefix + name] = *field;
}

void keep_block(CompressRun& run, index_t b, const StudentHybridWeights& w) {
  const std::string prefix = fmt::format("blk.{}.", b);
  for (model::HybridProj p : model::hybrid_block_projs(w.full_attention))
    if (hybrid_proj_is_blr(p)) run.ckpt.trained[prefix + model::hybrid_proj_name(p)] = w.proj[static_cast<std::size_t>(p)];
  for (auto [name, field] : trained_gains(w)) run.ckpt.trained_gains[prefix + name] = *field;
}

LayerwiseOptions scheduled(const LayerwiseOptions& peak, double mult) {
  LayerwiseOptions opt = peak;
  opt.scales.lr = static_cast<float>(peak.scales.lr * mult);
  opt.gains.lr = static_cast<float>(peak.gains.lr * mult);
  opt.signs.lr = static_cast<float>(peak.signs.lr * mult);
  return opt;
}

void write_checkpoint(CompressRun& run, index_t block, std::int64_t step, const GradScalerOptions& scaler_options,
                      const LayerwiseState* state, std::vector<std::byte> student_state) {
  run.ckpt.block = block;
  run.ckpt.trainer = TrainerState{.step = step,
                                  .applied_steps = state ? state->applied_steps : 0,
                                  .flip_seed = run.o.train.signs.seed,
                                  .tokens = run.rec.tokens,
                                  .seconds = run.train_seconds,
                                  .data = run.data,
                                  .scaler = state ? state->scaler.state() : GradScaler(scaler_options).state(),
                                  .schedule = run.schedule};
  run.ckpt.student_state = std::move(student_state);
  write_compress_checkpoint(run.ckpt_path, run.ckpt);
  run.ckpt.student_state = {};
}

}  // namespace bitrank::train
