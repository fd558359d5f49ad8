// The stages of `bitrank compress` before training (compress_run.hpp):
//   prepare_run          the checkpoint (read first: a resume with other
//                        options fails at once), the teacher, its tokenizer,
//                        the training and evaluation ids, the training
//                        windows of every step (fixed up front, seeded);
//   plan_and_initialise  the rank plan, the calibration statistics, the
//                        initialisation of every matrix still to train
//                        (Dual-SVID, activation-weighted or plain, or the
//                        --init file's), and the teacher's and the
//                        initialisation's perplexities;
//   start_training       the step log, progress line and schedule.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>

#include "bitrank/blr/init.hpp"
#include "bitrank/error.hpp"
#include "bitrank/io/corpus.hpp"
#include "bitrank/log.hpp"
#include "bitrank/model/make.hpp"
#include "bitrank/progress.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "bitrank/store/load.hpp"
#include "bitrank/thread_pool.hpp"
#include "bitrank/train/calibration.hpp"
#include "bitrank/train/teacher_text.hpp"
#include "train/compress_run.hpp"

namespace bitrank::train {
namespace {

std::string weight_name(const std::string& base) { return base + ".weight"; }

// N of a projection name blk.N.<proj>.
index_t block_of(const std::string& name) {
  const std::size_t dot = name.find('.', 4);
  BR_ASSERT(name.starts_with("blk.") && dot != std::string::npos, "projection name {} has no block", name);
  return static_cast<index_t>(std::stoll(name.substr(4, dot - 4)));
}

InitModel load_init(const std::filesystem::path& path, const model::HostWeights& teacher, int paths) {
  store::CompressedModel from = store::load_bitrank(path);
  const io::ModelConfig &a = from.config, &b = teacher.config;
  if (a.family != b.family || a.num_layers != b.num_layers || a.hidden_size != b.hidden_size ||
      a.vocab_size != b.vocab_size)
    fail("compress --init: {} is a compressed {} of {} blocks, hidden {}, vocabulary {}; the teacher {} is a {} of {} "
         "blocks, hidden {}, vocabulary {}",
         path.string(), io::model_family_name(a.family), a.num_layers, a.hidden_size, a.vocab_size, teacher.source,
         io::model_family_name(b.family), b.num_layers, b.hidden_size, b.vocab_size);
  InitModel init;
  for (const blr::RankPlan& p : model::compressible_projections(b)) {
    const auto it = from.blr.find(p.name);
    if (it == from.blr.end()) fail("compress --init: {} has no BLR matrix {}", path.string(), p.name);
    const blr::HostBlrMatrix& m = it->second;
    if (m.m != p.m || m.n != p.n)
      fail("compress --init: {} in {} is {}×{}, the teacher's projection is {}×{}", p.name, path.string(), m.m, m.n,
           p.m, p.n);
    if (std::ssize(m.paths) != paths)
      fail("compress --init: {} in {} has {} path(s), this run trains {} (--paths)", p.name, path.string(),
           m.paths.size(), paths);
    init.blr.emplace(p.name, std::move(from.blr.at(p.name)));
  }
  for (auto& [name, t] : from.dense) {
    if (!is_trained_gain(name, b)) continue;
    const auto it = teacher.tensors.find(name);
    if (it == teacher.tensors.end() || it->second.shape != t.shape)
      fail("compress --init: {} in {} has no tensor of its shape in the teacher", name, path.string());
    init.gains.emplace(name, std::move(t.values));
  }
  return init;
}

void read_checkpoint(CompressRun& run) {
  const CompressOptions& o = run.o;
  run.ckpt_path = compress_checkpoint_path(o.out);
  const nlohmann::ordered_json resume_options = compress_options_json(o);
  const bool checkpoint = std::filesystem::exists(run.ckpt_path);
  if (o.resume && !checkpoint) {
    // A run stopped before its first checkpoint starts afresh; a finished run deleted its checkpoint.
    if (std::filesystem::exists(o.out))
      fail("compress --resume: {} is complete (no checkpoint {}): nothing to resume; run without --resume to "
           "compress it again",
           o.out.string(), run.ckpt_path.string());
    BR_LOG_INFO("compress --resume: no checkpoint {} yet (the run stopped before its first): starting afresh",
                run.ckpt_path.string());
  } else if (o.resume) {
    run.ckpt = read_compress_checkpoint(run.ckpt_path);
    if (run.ckpt.objective != o.objective)
      fail("compress --resume: {} is the checkpoint of a run with the {} objective, this run's is {}",
           run.ckpt_path.string(), run.ckpt.objective, o.objective);
    check_resume_options(run.ckpt.options, resume_options, run.ckpt_path);
  } else if (std::filesystem::exists(run.ckpt_path)) {
    fail("compress: {} is the checkpoint of an interrupted run: pass --resume to continue it, or delete it to start "
         "afresh",
         run.ckpt_path.string());
  }
  run.ckpt.options = resume_options;
  run.ckpt.objective = o.objective;
  run.resumed = o.resume && checkpoint;
  run.first_block = run.ckpt.block;
  run.first_step = run.ckpt.trainer.step;
}

// Every step's windows, drawn up front; the position after them identifies the data.
void draw_windows(CompressRun& run, std::vector<std::int32_t> train_ids) {
  const CompressOptions& o = run.o;
  TrainWindows windows(std::move(train_ids),
                       WindowOptions{.seq_len = o.seq_len, .windows_per_step = o.windows_per_step, .seed = o.seed});
  run.step_ids.reserve(static_cast<std::size_t>(o.steps * run.rows()));
  for (std::int64_t s = 0; s < o.steps; ++s) {
    const Batch b = windows.next();
    run.step_ids.insert(run.step_ids.end(), b.ids.begin(), b.ids.end());
  }
  run.data = windows.position();
  const DataPosition& saved = run.ckpt.trainer.data;
  if (run.resumed && !(saved == run.data))
    fail("compress --resume: the training data differs from the checkpoint's: {} windows with ids fingerprint "
         "{:016x} (epoch {}, index {}), the checkpoint's {} windows with fingerprint {:016x} (epoch {}, index {})",
         run.data.windows, run.data.fingerprint, run.data.epoch, run.data.index, saved.windows, saved.fingerprint,
         saved.epoch, saved.index);
}

// The rank plan; with --init the ranks are the file's.
void plan_ranks(CompressRun& run) {
  const CompressOptions& o = run.o;
  if (run.from) {
    run.plan = model::compressible_projections(run.cfg());
    for (blr::RankPlan& p : run.plan) p.rank = run.from->blr.at(p.name).r;
  } else {
    run.plan = plan_ranks_for(o, model::compressible_projections(run.cfg()));
  }
  run.plan_block.resize(run.plan.size());
  for (std::size_t i = 0; i < run.plan.size(); ++i) run.plan_block[i] = block_of(run.plan[i].name);
  if (run.resumed) {
    bool same = run.ckpt.matrices.size() == run.plan.size();
    for (const blr::RankPlan& p : run.plan) {
      const auto it = run.ckpt.matrices.find(p.name);
      same = same && it != run.ckpt.matrices.end() && it->second.m == p.m && it->second.n == p.n &&
             it->second.rank == p.rank && it->second.paths == o.paths;
    }
    if (!same)
      fail("compress --resume: the rank plan differs from the one {} was trained with", run.ckpt_path.string());
  }
}

// The checkpoint's position against the run's units, blocks, matrices and gains.
void check_resume_point(const CompressRun& run, index_t units) {
  if (!run.resumed) return;
  const CompressOptions& o = run.o;
  const bool e2e = o.objective == "e2e";
  const index_t L = run.cfg().num_layers, first_block = run.first_block;
  const std::int64_t first_step = run.first_step;
  const auto matrices_of = [&](index_t blocks) {
    return static_cast<std::ptrdiff_t>(std::ranges::count_if(run.plan_block, [&](index_t b) { return b < blocks; }));
  };
  const auto gains_of = [&](index_t blocks) {
    std::ptrdiff_t n = 0;
    for (index_t b = 0; b < blocks; ++b) n += std::ssize(trained_gain_names(run.cfg(), b));
    return n;
  };
  const std::size_t logs = static_cast<std::size_t>(first_block) + (first_step > 0 ? 1 : 0);
  // e2e: every matrix and gain (the final norm's too) once done, none before.
  const bool done = first_block == units;
  const std::ptrdiff_t matrices = e2e ? (done ? matrices_of(L) : 0) : matrices_of(first_block);
  const std::ptrdiff_t gains = e2e ? (done ? gains_of(L) + 1 : 0) : gains_of(first_block);
  const CompressCheckpoint& c = run.ckpt;
  if (first_block > units || first_step >= o.steps || (done && first_step > 0) || c.blocks.size() != logs ||
      (first_step > 0 && std::ssize(c.blocks.back().losses) != first_step) || std::ssize(c.trained) != matrices ||
      std::ssize(c.trained_gains) != gains)
    fail("compress --resume: {} is inconsistent: block {} step {} of a {} run of {} blocks of {} steps, {} block "
         "logs, {} trained matrices",
         run.ckpt_path.string(), first_block, first_step, o.objective, units, o.steps, c.blocks.size(),
         c.trained.size());
  BR_LOG_INFO("compress: resuming {} at block {}, step {}", run.ckpt_path.string(), first_block, first_step);
}

// The calibration ids: the first calib_windows training windows (whole steps' windows, in step order).
std::span<const std::int32_t> calibration_ids(const CompressRun& run) {
  const std::int64_t windows =
      std::min<std::int64_t>(run.o.calib_windows, run.o.steps * run.o.windows_per_step);
  return std::span<const std::int32_t>(run.step_ids).first(static_cast<std::size_t>(windows * run.o.seq_len));
}

// Initialises the matrices still to train: one per pool thread, each SVD
// single-threaded (OpenBLAS's own threads on top of the pool's
// oversubscribe the cores: measured, 16 cores slower than 2).
void initialise_matrices(CompressRun& run, const std::vector<char>& needed) {
  const CompressOptions& o = run.o;
  const auto t_init = CompressClock::now();
  const bool weighted = o.init_method != "svid" && !run.from;
  const std::string rotated = o.init_rotate > 0 ? fmt::format(", {} ITQ rounds", o.init_rotate) : std::string();
  const std::string refined =
      o.init_refine == 0          ? rotated
      : o.init_method == "gram"   ? fmt::format("{}, {} sweeps under the input Grams", rotated, o.init_refine)
                                  : fmt::format("{}, {} refinement sweeps", rotated, o.init_refine);
  const std::string init_what = run.from   ? fmt::format("from {}", o.init.string())
                                : weighted ? "activation-weighted Dual-SVID" + refined
                                           : "Dual-SVID" + refined;
  std::vector<blr::HostBlrMatrix> init(run.plan.size());
  run.init_error.assign(run.plan.size(), 0.0);
  run.init_output_error.assign(run.plan.size(), std::numeric_limits<double>::quiet_NaN());
  const std::int64_t to_init = std::ranges::count(needed, 1);
  const int blas_threads = openblas_get_num_threads();
  openblas_set_num_threads(1);
  std::atomic<std::int64_t> done{0};
  std::mutex mu;
  ProgressLine progress;
  ThreadPool::global().parallel_for(static_cast<std::int64_t>(run.plan.size()), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (!needed[k]) continue;
      const blr::RankPlan& p = run.plan[k];
      const auto& w = run.weights.at(weight_name(p.name)).values;
      const auto rms = run.inputs.rms.find(p.name);
      const std::vector<float> scale =
          rms == run.inputs.rms.end() ? std::vector<float>{} : column_scale_from_rms(rms->second);
      const auto gram = run.inputs.gram.find(p.name);
      const std::span<const float> input_gram =
          gram == run.inputs.gram.end() ? std::span<const float>{} : std::span<const float>(*gram->second);
      if (run.from) {
        init[k] = std::move(run.from->blr.at(p.name));  // read once: the file's copy is not needed again
      } else {
        blr::InitOptions io{.rank = p.rank, .paths = o.paths, .engine = o.svd_engine, .name = p.name,
                            .refine_sweeps = o.init_refine, .rotation_iterations = o.init_rotate};
        io.svd.seed = o.seed + static_cast<std::uint64_t>(i);
        if (weighted) io.column_scale = scale;
        io.input_gram = input_gram;
        init[k] = blr::dual_svid(w, p.m, p.n, io);
      }
      run.init_error[k] = blr::relative_error(w, init[k]);
      // The output error: under the Gram where there is one, else its diagonal approximation.
      if (!input_gram.empty())
        run.init_output_error[k] = blr::relative_output_error(w, init[k], input_gram);
      else if (!scale.empty())
        run.init_output_error[k] = blr::relative_error(w, init[k], scale);
      const std::int64_t count = ++done;
      std::lock_guard lock(mu);
      progress.update(fmt::format("init: {} {}/{} matrices", init_what, count, to_init));
    }
  });
  openblas_set_num_threads(blas_threads);
  progress.finish(fmt::format("init: {} matrices {} in {:.1f} s (SVDs: {})", to_init, init_what,
                              seconds_since(t_init), run.svd_where));
  for (std::size_t i = 0; i < run.plan.size(); ++i) {
    const blr::RankPlan& p = run.plan[i];
    if (!needed[i]) {
      run.init_error[i] = run.ckpt.matrices.at(p.name).init_rel_error;
      run.init_output_error[i] = run.ckpt.matrices.at(p.name).init_output_error;
      continue;
    }
    const std::uint64_t fingerprint = blr_fingerprint(init[i]);
    if (run.resumed && fingerprint != run.ckpt.matrices.at(p.name).init_fingerprint)
      fail("compress --resume: the initialisation of {} differs from the one {} was trained with (other teacher "
           "weights, or a non-deterministic SVD on this machine)",
           p.name, run.ckpt_path.string());
    run.ckpt.matrices[p.name] =
        CompressMatrixInit{p.m, p.n, p.rank, o.paths, run.init_error[i], fingerprint, run.init_output_error[i]};
    run.init_blr.emplace(p.name, std::move(init[i]));
  }
  if (!run.resumed) run.ckpt.init_seconds = seconds_since(t_init);
}

// Teacher and initialisation perplexity (a resumed run has them from the
// checkpoint); the initialisation's is null without eval_init.
void measure_start(CompressRun& run) {
  const CompressOptions& o = run.o;
  const Perplexity teacher = perplexity(*run.teacher, run.eval_ids, o.eval_seq_len, run.eval_windows, "teacher");
  if (!o.eval_init) {
    run.ckpt.perplexity = {{"teacher", ppl_json(teacher)}, {"init", nullptr}};
    return;
  }
  // --init: the starting model has the teacher's dense tensors but the
  // file's gains, swapped into `weights` while it is built (a model copies
  // what it reads) and swapped back right after.
  const auto swap_gains = [&] {
    if (run.from)
      for (auto& [name, v] : run.from->gains) std::swap(run.weights.tensors.at(name).values, v);
  };
  swap_gains();
  const std::unique_ptr<model::DecoderModel<float>> student0 =
      model::make_model(run.be, run.weights, run.init_blr, run.streaming.stream);
  swap_gains();
  const Perplexity init = perplexity(*student0, run.eval_ids, o.eval_seq_len, run.eval_windows,
                                     run.from ? "the --init model" : "initialisation");
  run.ckpt.perplexity = {{"teacher", ppl_json(teacher)}, {"init", ppl_json(init)}};
}


// The training ids: the text (its first max_text_tokens), without any run of
// 64 ids that also occurs in the evaluation text (train/data.hpp: texts
// repeat across files), and the teacher's samples — alone (data "teacher")
// or as teacher_share of the windows.
std::vector<std::int32_t> training_ids(CompressRun& run) {
  const CompressOptions& o = run.o;
  std::vector<std::int32_t> ids;
  if (o.data == "text") {
    TextSources sources;
    sources.paths = o.texts;
    if (!o.eval_text.empty()) sources.exclude = {o.eval_text};
    run.train_text = load_training_text(sources);
    ids = run.tokenizer->encode(run.train_text.text);
    run.train_text.text = {};
    HeldOutOverlap clean = remove_held_out_runs(ids, run.eval_ids, 64);
    if (clean.removed > 0) {
      BR_LOG_INFO("compress: {} training ids removed: runs of 64 that occur in the evaluation text", clean.removed);
      run.train_text.name += fmt::format(" less {} ids shared with the evaluation text", clean.removed);
    }
    ids = std::move(clean.ids);
    if (o.max_text_tokens > 0 && std::ssize(ids) > o.max_text_tokens) {
      ids.resize(static_cast<std::size_t>(o.max_text_tokens));
      run.train_text.name += fmt::format(", its first {} tokens", o.max_text_tokens);
    }
  }
  if (o.data == "text" && o.teacher_share == 0) return ids;
  TeacherTextOptions t;
  t.tokens = o.teacher_tokens;
  t.seq_len = o.seq_len;
  t.seed = o.seed;
  t.model_id = teacher_fingerprint(run.weights);
  t.cache = o.out.string() + ".teacher.ids";
  const TeacherText teacher = generate_teacher_text(*run.teacher, *run.tokenizer, t);
  BR_LOG_INFO("compress: {} ({})", teacher.name, teacher.cache_status);
  if (o.data == "teacher") {
    run.train_text.name = teacher.name;
    return teacher.ids;
  }
  const MixedIds mixed =
      mix_token_streams(ids, teacher.ids, MixOptions{.share = o.teacher_share, .seq_len = o.seq_len, .seed = o.seed});
  run.train_text.name += fmt::format(" mixed with {} ({} of {} windows)", teacher.name, mixed.from_b,
                                     mixed.from_a + mixed.from_b);
  return mixed.ids;
}

}  // namespace

void prepare_run(CompressRun& run) {
  const CompressOptions& o = run.o;
  read_checkpoint(run);
  run.weights = store::load_weights(o.model);
  const io::ModelConfig& cfg = run.cfg();
  if (!o.init.empty()) run.from = load_init(o.init, run.weights, o.paths);
  run.streaming = choose_streaming(o.stream, o.device_memory_cap, model::model_device_bytes<float>(run.weights));
  if (o.device != "cpu" || run.streaming.stream)
    BR_LOG_INFO("compress: {} ({})",
                run.streaming.stream ? "streaming the blocks from host memory" : "blocks resident on the device",
                run.streaming.reason);
  run.tokenizer.emplace(io::load_model_tokenizer(o.model));
  run.eval_ids = run.tokenizer->encode(o.eval_text.empty()
                                           ? io::read_corpus_text(io::split_corpus(io::corpus_files()).eval)
                                           : io::read_corpus_text({o.eval_text}));
  const std::int64_t available = static_cast<std::int64_t>(run.eval_ids.size()) / o.eval_seq_len;
  run.eval_windows = o.eval_windows == 0 ? available : std::min(o.eval_windows, available);
  if (run.eval_windows < 1) fail("compress: the evaluation text holds no window of {} tokens", o.eval_seq_len);
  // The teacher as its family's model; the objectives read its blocks
  // through llama_teacher or hybrid_teacher (exactly one is set).
  run.teacher = model::make_model(run.be, run.weights, {}, run.streaming.stream);
  run.llama_teacher = dynamic_cast<const model::LlamaModel<float>*>(run.teacher.get());
  run.hybrid_teacher = dynamic_cast<const model::HybridModel<float>*>(run.teacher.get());
  BR_ASSERT((run.llama_teacher != nullptr) != run.hybrid() && (run.hybrid_teacher != nullptr) == run.hybrid(),
            "make_model gave no model of the {} family", cfg.model_type);
  std::vector<std::int32_t> train_ids = training_ids(run);
  BR_LOG_INFO("compress: {} ({} blocks, hidden {}), training text: {} ({} tokens), eval: {} windows of {}",
              run.weights.source, cfg.num_layers, cfg.hidden_size, run.train_text.name, train_ids.size(),
              run.eval_windows, o.eval_seq_len);
  draw_windows(run, std::move(train_ids));
}

void plan_and_initialise(CompressRun& run, index_t units) {
  const CompressOptions& o = run.o;
  plan_ranks(run);
  check_resume_point(run, units);
  const bool e2e = o.objective == "e2e";
  std::vector<char> needed(run.plan.size(), run.resumed ? 0 : 1);
  for (std::size_t i = 0; i < run.plan.size(); ++i)
    if (e2e ? run.first_block == 0 : run.plan_block[i] >= run.first_block) needed[i] = 1;
  // Calibration statistics: the activation-weighted init reads them, and the
  // summary's output errors (for any init) come from them.
  if (o.calib_windows > 0 && std::ranges::count(needed, 1) > 0) {
    const auto t = CompressClock::now();
    const auto ids = calibration_ids(run);
    run.inputs = projection_inputs(*run.teacher, ids, o.seq_len, o.init_method == "gram" && !run.from);
    BR_LOG_INFO("compress: calibration statistics{} of {} projections over {} windows of {} ({:.1f} s)",
                run.inputs.gram.empty() ? "" : " (with input Grams)", run.inputs.rms.size(),
                static_cast<index_t>(ids.size()) / o.seq_len, o.seq_len, seconds_since(t));
  }
  run.svd_where = run.from ? "none (--init)" : !o.svd_engine ? "cpu" : o.svd_label.empty() ? "gpu" : o.svd_label;
  initialise_matrices(run, needed);
  if (!run.resumed) measure_start(run);
}

void start_training(CompressRun& run, index_t units) {
  const CompressOptions& o = run.o;
  run.log_path = o.out.string() + ".steps.jsonl";
  run.plot_path = o.out.string() + ".loss.svg";
  const std::int64_t resume_step = run.first_block * o.steps + run.first_step;
  run.log.emplace(run.log_path, run.resumed ? resume_step : -1);
  run.rec = StepRecord{.step = resume_step - 1, .tokens = run.ckpt.trainer.tokens, .seconds = run.ckpt.trainer.seconds};
  run.progress.emplace(units * o.steps, run.resumed ? &run.rec : nullptr);
  if (units > 1) run.progress->describe(o.steps, "block MSE");
  else if (o.objective == "e2e") run.progress->describe(0, "KL + MSE");
  run.train_seconds = run.ckpt.trainer.seconds;
  run.schedule = LrScheduleOptions{
      .peak = 1.0,
      .warmup_steps = static_cast<std::int64_t>(o.warmup_fraction * static_cast<double>(o.steps)),
      .total_steps = o.steps,
      .floor_fraction = 0.1};
  if (run.resumed && !(run.ckpt.trainer.schedule == run.schedule))
    fail("compress --resume: the learning-rate schedule of {} differs from this run's", run.ckpt_path.string());
}

}  // namespace bitrank::train
