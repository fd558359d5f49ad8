// `bitrank compress` (contract and design: include/bitrank/train/compress.hpp).
#include "bitrank/train/compress.hpp"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "bitrank/blr/accounting.hpp"
#include "bitrank/blr/init.hpp"
#include "bitrank/error.hpp"
#include "bitrank/io/bitrank_format.hpp"
#include "bitrank/io/corpus.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/log.hpp"
#include "bitrank/model/load.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/model/projection.hpp"
#include "bitrank/progress.hpp"
#include "bitrank/thread_pool.hpp"
#include "bitrank/train/data.hpp"
#include "bitrank/train/e2e.hpp"
#include "bitrank/train/plot.hpp"
#include "bitrank/train/report.hpp"
#include "bitrank/train/schedule.hpp"
#include "bitrank/train/streaming.hpp"
#include "bitrank/train/student_block.hpp"
#include "bitrank/train/student_hybrid_block.hpp"

namespace bitrank::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Perplexity {
  double nll = 0, ppl = 0;
  std::int64_t windows = 0, tokens = 0;
  double seconds = 0;
};

// Perplexity over the first `windows` windows of `ids` (as `bitrank eval`:
// each window predicts its tokens 1..T−1), a few windows per call.
Perplexity perplexity(const model::DecoderModel<float>& m, std::span<const std::int32_t> ids, index_t T,
                      std::int64_t windows, const char* what) {
  const auto t0 = Clock::now();
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
               since(t0)};
  progress.finish(fmt::format("eval {}: {} windows of {}  ppl {:.3f}  ({:.1f} s)", what, windows, T, p.ppl, p.seconds));
  return p;
}

nlohmann::ordered_json ppl_json(const Perplexity& p) {
  return {{"ppl", p.ppl}, {"nll", p.nll}, {"windows", p.windows}, {"tokens", p.tokens}, {"seconds", p.seconds}};
}

std::string weight_name(const std::string& base) { return base + ".weight"; }

// N of a projection name blk.N.<proj>.
index_t block_of(const std::string& name) {
  const std::size_t dot = name.find('.', 4);
  BR_ASSERT(name.starts_with("blk.") && dot != std::string::npos, "projection name {} has no block", name);
  return static_cast<index_t>(std::stoll(name.substr(4, dot - 4)));
}

}  // namespace

void validate(const CompressOptions& o) {
  if (o.model.empty()) fail("compress: no --model given and no default model was found when bitrank was built");
  if (o.out.empty()) fail("compress: no output file (-o) given");
  if (o.objective != "layer" && o.objective != "e2e")
    fail("compress: objective '{}' is not one of layer, e2e", o.objective);
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

// The norm gains a block's student trains (and compress writes into the
// model it saves), as (tensor name within the block, field) pairs: Llama
// attn/ffn norms; hybrid attn/post-attention norms and, in full-attention
// blocks, the q/k norms. The one list that initialising, keeping, counting
// and recognising them go through; e2e also trains the final norm.
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
constexpr const char* kFinalNorm = "output_norm.weight";

// The names of block b's trained gains.
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

// The start of a run given --init: the file's BLR matrices, each the shape
// and path count the teacher's projection needs, and its trained gains.
struct InitModel {
  std::map<std::string, blr::HostBlrMatrix> blr;
  std::map<std::string, std::vector<float>> gains;
};

InitModel load_init(const std::filesystem::path& path, const model::HostWeights& teacher, int paths) {
  io::CompressedModel from = io::load_bitrank(path);
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

nlohmann::ordered_json compress(const CompressOptions& o, Backend<float>& be) {
  validate(o);
  const auto t_start = Clock::now();
  const DeviceMemoryCap cap(*be.memory, o.device_memory_cap);
  be.memory->reset_peak();

  // 0. The checkpoint, read before any work so that a resume with other
  // options fails at once. `run` is the run's state from here on: what a
  // checkpoint writes (compress_checkpoint.hpp).
  const std::filesystem::path ckpt_path = compress_checkpoint_path(o.out);
  const nlohmann::ordered_json resume_options = compress_resume_options(o);
  CompressCheckpoint run;
  if (o.resume) {
    if (!std::filesystem::exists(ckpt_path))
      fail("compress --resume: there is no checkpoint {} to resume from", ckpt_path.string());
    run = read_compress_checkpoint(ckpt_path);
    if (run.objective != o.objective)
      fail("compress --resume: {} is the checkpoint of a run with the {} objective, this run's is {}",
           ckpt_path.string(), run.objective, o.objective);
    check_resume_options(run.options, resume_options, ckpt_path);
  } else if (std::filesystem::exists(ckpt_path)) {
    fail("compress: {} is the checkpoint of an interrupted run: pass --resume to continue it, or delete it to start "
         "afresh",
         ckpt_path.string());
  }
  run.options = resume_options;
  run.objective = o.objective;
  const bool resumed = o.resume;
  // The end-to-end objective trains every block at once: one training unit
  // where the layer-wise objective has one per block (the checkpoint's
  // `block` counts these units).
  const bool e2e = o.objective == "e2e";

  // 1. Teacher, tokenizer, text.
  // (Not const: --init swaps its gains in for the starting perplexity, and back.)
  model::HostWeights weights = model::load_weights(o.model);
  const io::ModelConfig& cfg = weights.config;
  const bool hybrid = cfg.is_hybrid();
  // --init: the compressed model this run starts from (else Dual-SVID, step 2).
  std::optional<InitModel> from;
  if (!o.init.empty()) from = load_init(o.init, weights, o.paths);
  const StreamChoice streaming =
      choose_streaming(o.stream, o.device_memory_cap, model::model_device_bytes<float>(weights));
  BR_LOG_INFO("compress: {} ({})",
              streaming.stream ? "streaming the blocks from host memory" : "blocks resident on the device",
              streaming.reason);
  const io::Tokenizer tokenizer = io::load_model_tokenizer(o.model);
  const TrainingText train_text = load_training_text(o.text);
  std::vector<std::int32_t> train_ids = tokenizer.encode(train_text.text);
  const std::vector<std::int32_t> eval_ids = tokenizer.encode(
      o.eval_text.empty() ? io::read_corpus_text(io::split_corpus(io::corpus_files()).eval)
                          : io::read_corpus_text({o.eval_text}));
  const index_t T = o.seq_len, nb = o.windows_per_step, d = cfg.hidden_size, L = cfg.num_layers;
  const std::int64_t eval_available = static_cast<std::int64_t>(eval_ids.size()) / o.eval_seq_len;
  const std::int64_t eval_windows = o.eval_windows == 0 ? eval_available : std::min(o.eval_windows, eval_available);
  if (eval_windows < 1) fail("compress: the evaluation text holds no window of {} tokens", o.eval_seq_len);
  BR_LOG_INFO("compress: {} ({} blocks, hidden {}), training text: {} ({} tokens), eval: {} windows of {}",
         weights.source, L, d, train_text.name, train_ids.size(), eval_windows, o.eval_seq_len);

  // The compressible projections of the family (model/projection.hpp), their
  // ranks, and the block each belongs to (names blk.N.<proj>).
  // With --init the ranks are the file's.
  std::vector<blr::RankPlan> plan;
  if (from) {
    plan = model::compressible_projections(cfg);
    for (blr::RankPlan& p : plan) p.rank = from->blr.at(p.name).r;
  } else {
    plan = blr::plan_ranks(model::compressible_projections(cfg), o.bpw, o.bpw_overrides, o.paths, 16);
  }
  std::vector<index_t> plan_block(plan.size());
  for (std::size_t i = 0; i < plan.size(); ++i) plan_block[i] = block_of(plan[i].name);
  const auto trained_matrices = [&](index_t blocks) {
    return static_cast<std::ptrdiff_t>(std::ranges::count_if(plan_block, [&](index_t b) { return b < blocks; }));
  };
  const auto trained_gain_count = [&](index_t blocks) {
    std::ptrdiff_t n = 0;
    for (index_t b = 0; b < blocks; ++b) n += std::ssize(trained_gain_names(cfg, b));
    return n;
  };

  // Where training continues: block first_block, its step first_step.
  const index_t first_block = run.block, units = e2e ? 1 : L;
  const std::int64_t first_step = run.trainer.step;
  if (resumed) {
    const std::size_t logs = static_cast<std::size_t>(first_block) + (first_step > 0 ? 1 : 0);
    // e2e: every matrix and gain (the final norm's too) once done, none before.
    const bool done = first_block == units;
    const std::ptrdiff_t matrices = e2e ? (done ? trained_matrices(L) : 0) : trained_matrices(first_block);
    const std::ptrdiff_t gains = e2e ? (done ? trained_gain_count(L) + 1 : 0) : trained_gain_count(first_block);
    if (first_block > units || first_step >= o.steps || (done && first_step > 0) || run.blocks.size() != logs ||
        (first_step > 0 && std::ssize(run.blocks.back().losses) != first_step) || std::ssize(run.trained) != matrices ||
        std::ssize(run.trained_gains) != gains)
      fail("compress --resume: {} is inconsistent: block {} step {} of a {} run of {} blocks of {} steps, {} block "
           "logs, {} trained matrices",
           ckpt_path.string(), first_block, first_step, o.objective, units, o.steps, run.blocks.size(),
           run.trained.size());
    BR_LOG_INFO("compress: resuming {} at block {}, step {}", ckpt_path.string(), first_block, first_step);
  }

  // 2. Ranks and Dual-SVID initialisation (on resume, of the blocks still to train).
  const auto t_init = Clock::now();
  const std::string svd_where = from                ? "none (--init)"
                                : !o.svd_engine     ? "cpu"
                                : o.svd_label.empty() ? "gpu"
                                                      : o.svd_label;
  const std::string init_what = from ? fmt::format("from {}", o.init.string()) : std::string("Dual-SVID");
  std::vector<char> needed(plan.size(), resumed ? 0 : 1);
  for (std::size_t i = 0; i < plan.size(); ++i)
    if (e2e ? first_block == 0 : plan_block[i] >= first_block) needed[i] = 1;
  if (resumed) {
    bool same = run.matrices.size() == plan.size();
    for (const blr::RankPlan& p : plan) {
      const auto it = run.matrices.find(p.name);
      same = same && it != run.matrices.end() && it->second.m == p.m && it->second.n == p.n &&
             it->second.rank == p.rank && it->second.paths == o.paths;
    }
    if (!same) fail("compress --resume: the rank plan differs from the one {} was trained with", ckpt_path.string());
  }
  std::vector<blr::HostBlrMatrix> init(plan.size());
  std::vector<double> init_error(plan.size());
  std::int64_t to_init = 0;
  for (char n : needed) to_init += n;
  {
    // One matrix per pool thread, each SVD single-threaded: OpenBLAS's own
    // threads on top of the pool's oversubscribe the cores (measured: 16
    // cores slower than 2).
    const int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
    std::atomic<std::int64_t> done{0};
    std::mutex mu;
    ProgressLine progress;
    ThreadPool::global().parallel_for(static_cast<std::int64_t>(plan.size()), [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        if (!needed[static_cast<std::size_t>(i)]) continue;
        const blr::RankPlan& p = plan[static_cast<std::size_t>(i)];
        const auto& w = weights.at(weight_name(p.name)).values;
        if (from) {
          init[static_cast<std::size_t>(i)] = std::move(from->blr.at(p.name));  // read once: the file's copy is not needed again
        } else {
          blr::InitOptions io{.rank = p.rank, .paths = o.paths, .engine = o.svd_engine, .name = p.name};
          io.svd.seed = o.seed + static_cast<std::uint64_t>(i);
          init[static_cast<std::size_t>(i)] = blr::dual_svid(w, p.m, p.n, io);
        }
        init_error[static_cast<std::size_t>(i)] = blr::relative_error(w, init[static_cast<std::size_t>(i)]);
        const std::int64_t k = ++done;
        std::lock_guard lock(mu);
        progress.update(fmt::format("init: {} {}/{} matrices", init_what, k, to_init));
      }
    });
    openblas_set_num_threads(blas_threads);
    progress.finish(fmt::format("init: {} matrices {} in {:.1f} s (SVDs: {})", to_init, init_what, since(t_init),
                                svd_where));
  }
  model::BlrProjections init_blr;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const blr::RankPlan& p = plan[i];
    if (!needed[i]) {
      init_error[i] = run.matrices.at(p.name).init_rel_error;
      continue;
    }
    const std::uint64_t fingerprint = blr_fingerprint(init[i]);
    if (resumed && fingerprint != run.matrices.at(p.name).init_fingerprint)
      fail("compress --resume: the Dual-SVID initialisation of {} differs from the one {} was trained with (other "
           "teacher weights, or a non-deterministic SVD on this machine)",
           p.name, ckpt_path.string());
    run.matrices[p.name] = CompressMatrixInit{p.m, p.n, p.rank, o.paths, init_error[i], fingerprint};
    init_blr.emplace(p.name, std::move(init[i]));
  }
  if (!resumed) run.init_seconds = since(t_init);

  // Teacher and initialisation perplexity (a resumed run has them from the checkpoint).
  // The teacher as its family's model; the layer-wise loop reads its blocks
  // through llama_teacher or hybrid_teacher (exactly one is set).
  std::unique_ptr<model::DecoderModel<float>> teacher_model = model::make_model(be, weights, {}, streaming.stream);
  const model::DecoderModel<float>& teacher = *teacher_model;
  const auto* llama_teacher = dynamic_cast<const model::LlamaModel<float>*>(teacher_model.get());
  const auto* hybrid_teacher = dynamic_cast<const model::HybridModel<float>*>(teacher_model.get());
  BR_ASSERT((llama_teacher != nullptr) != hybrid && (hybrid_teacher != nullptr) == hybrid,
            "make_model gave no model of the {} family", cfg.model_type);
  const std::span<const std::int32_t> eval_span(eval_ids);
  if (!resumed) {
    const Perplexity ppl_teacher = perplexity(teacher, eval_span, o.eval_seq_len, eval_windows, "teacher");
    // --init: the starting model has the teacher's dense tensors but the
    // file's gains, swapped into `weights` while it is built (a model copies
    // what it reads) and swapped back right after.
    const auto swap_gains = [&] {
      if (from)
        for (auto& [name, v] : from->gains) std::swap(weights.tensors.at(name).values, v);
    };
    swap_gains();
    const std::unique_ptr<model::DecoderModel<float>> student0 =
        model::make_model(be, weights, init_blr, streaming.stream);
    swap_gains();
    const Perplexity ppl_init =
        perplexity(*student0, eval_span, o.eval_seq_len, eval_windows, from ? "the --init model" : "Dual-SVID init");
    run.perplexity = {{"teacher", ppl_json(ppl_teacher)}, {"init", ppl_json(ppl_init)}};
  }

  // 3. Layer-wise training.
  TrainWindows windows(std::move(train_ids), WindowOptions{.seq_len = T, .windows_per_step = nb, .seed = o.seed});
  const index_t rows = nb * T, N = o.steps * rows;
  std::vector<std::int32_t> step_ids;
  step_ids.reserve(static_cast<std::size_t>(N));
  for (std::int64_t s = 0; s < o.steps; ++s) {
    const Batch b = windows.next();
    step_ids.insert(step_ids.end(), b.ids.begin(), b.ids.end());
  }
  // The position after every step's windows identifies the data (its fingerprint) and the batching.
  const DataPosition data = windows.position();
  if (resumed && !(run.trainer.data == data))
    fail("compress --resume: the training data differs from the checkpoint's: {} windows with ids fingerprint "
         "{:016x} (epoch {}, index {}), the checkpoint's {} windows with fingerprint {:016x} (epoch {}, index {})",
         data.windows, data.fingerprint, data.epoch, data.index, run.trainer.data.windows,
         run.trainer.data.fingerprint, run.trainer.data.epoch, run.trainer.data.index);
  Memory& mem = *be.memory;
  // The hidden states of every training window at the current block's
  // input (x) and the teacher block's output on them (y), [N][d] each. On
  // the device when the run is neither streamed nor capped: a step reads
  // its windows in place. Otherwise in host memory, one step's windows
  // moved to x_dev / y_dev at a time. (e2e keeps none of this.)
  const bool windows_on_device = !e2e && !streaming.stream && o.device_memory_cap == 0;
  const std::size_t step_elems = static_cast<std::size_t>(rows * d);
  const std::size_t dev_elems = e2e ? 0 : windows_on_device ? static_cast<std::size_t>(N * d) : step_elems;
  std::vector<float> x_host(windows_on_device || e2e ? 0 : static_cast<std::size_t>(N * d)), y_host(x_host.size());
  Buffer<float> x_dev(mem, dev_elems), y_dev(mem, dev_elems);
  const auto window = [&](Buffer<float>& dev, std::int64_t s) {
    return View<float>(dev.data() + (windows_on_device ? static_cast<std::size_t>(s) * step_elems : 0), Shape{rows, d});
  };
  // Step s's windows into x_dev / y_dev (nothing to move when they live there).
  const auto load = [&](Buffer<float>& dev, const std::vector<float>& host, std::int64_t s) {
    if (!windows_on_device) mem.upload(dev.data(), host.data() + s * rows * d, step_elems * sizeof(float));
  };
  const auto store = [&](std::vector<float>& host, const Buffer<float>& dev, std::int64_t s) {
    if (!windows_on_device) mem.download(host.data() + s * rows * d, dev.data(), step_elems * sizeof(float));
  };
  // The next block's inputs are this block's teacher outputs.
  const auto next_block = [&] {
    std::swap(x_host, y_host);
    std::swap(x_dev, y_dev);
  };
  for (std::int64_t s = 0; s < o.steps && !e2e; ++s) {
    teacher.embed(std::span<const std::int32_t>(step_ids).subspan(static_cast<std::size_t>(s * rows),
                                                                 static_cast<std::size_t>(rows)),
                  window(x_dev, s));
    store(x_host, x_dev, s);
  }
  model::BlockActivations<float> teacher_acts;
  model::HybridBlockActivations<float> hybrid_teacher_acts;
  // y = teacher block b on x, step by step.
  const auto teacher_block = [&](index_t b) {
    for (std::int64_t s = 0; s < o.steps; ++s) {
      load(x_dev, x_host, s);
      if (hybrid)  // inference only: no GDN tape
        hybrid_teacher->block_forward(b, window(x_dev, s), T, hybrid_teacher_acts, window(y_dev, s), false);
      else
        llama_teacher->block_forward(b, window(x_dev, s), T, teacher_acts, window(y_dev, s));
      store(y_host, y_dev, s);
    }
  };
  if (!e2e && first_block < L) {
    // Resume: the teacher's hidden states at block first_block's input, computed as the first run did.
    for (index_t b = 0; b < first_block; ++b) {
      teacher_block(b);
      next_block();
    }
  }

  const model::LlamaBlockDims dims = hybrid ? model::LlamaBlockDims{} : model::LlamaBlockDims::of(cfg);
  const std::filesystem::path log_path = o.out.string() + ".steps.jsonl", plot_path = o.out.string() + ".loss.svg";
  const std::int64_t resume_step = first_block * o.steps + first_step;
  StepLog log(log_path, resumed ? resume_step : -1);
  StepRecord rec{.step = resume_step - 1, .tokens = run.trainer.tokens, .seconds = run.trainer.seconds};
  TrainProgress progress(units * o.steps, resumed ? &rec : nullptr);
  LayerwiseBuffers<float> bufs;
  LayerwiseBuffersOf<StudentHybridBlock<float>> hybrid_bufs;
  double train_seconds = run.trainer.seconds;
  const GradScalerOptions scaler_options = layerwise_scaler_options(rows * d);
  const LrScheduleOptions schedule_options{
      .peak = 1.0,
      .warmup_steps = static_cast<std::int64_t>(o.warmup_fraction * static_cast<double>(o.steps)),
      .total_steps = o.steps,
      .floor_fraction = 0.1};
  const LrSchedule schedule(schedule_options);
  if (resumed && !(run.trainer.schedule == schedule_options))
    fail("compress --resume: the learning-rate schedule of {} differs from this run's", ckpt_path.string());
  // Writes the checkpoint of block `block` after `step` of its steps (state and student: that block's, or none).
  // `student_state`: the block's download_state, or empty.
  const auto checkpoint = [&](index_t block, std::int64_t step, const LayerwiseState* state,
                              std::vector<std::byte> student_state) {
    run.block = block;
    run.trainer = TrainerState{.step = step,
                               .applied_steps = state ? state->applied_steps : 0,
                               .flip_seed = o.train.signs.seed,
                               .tokens = rec.tokens,
                               .seconds = train_seconds,
                               .data = data,
                               .scaler = state ? state->scaler.state() : GradScaler(scaler_options).state(),
                               .schedule = schedule_options};
    run.student_state = std::move(student_state);
    write_compress_checkpoint(ckpt_path, run);
    run.student_state = {};
  };
  // Trains block b's student (StudentLlamaBlock or StudentHybridBlock, built
  // from the initialisation) for its steps; `keep` moves its trained weights
  // into run.trained / run.trained_gains once the block is done.
  const auto train_block = [&]<class Student>(index_t b, Student& student, auto&& keep) {
    LayerwiseBuffersOf<Student>* buffers;
    if constexpr (std::is_same_v<Student, StudentLlamaBlock<float>>)
      buffers = &bufs;
    else
      buffers = &hybrid_bufs;
    LayerwiseState state(scaler_options);
    std::int64_t s0 = 0;
    if (b == first_block && first_step > 0) {
      student.upload_state(run.student_state);
      run.student_state = {};
      state.applied_steps = run.trainer.applied_steps;
      state.scaler = GradScaler(scaler_options, run.trainer.scaler);
      s0 = first_step;
    } else {
      run.blocks.emplace_back();
    }
    CompressBlockLog& block_log = run.blocks.back();
    for (std::int64_t s = s0; s < o.steps; ++s) {
      const std::int64_t step = b * o.steps + s;
      const auto t_step = Clock::now();
      load(x_dev, x_host, s);
      load(y_dev, y_host, s);
      const double mult = schedule.lr(s);
      LayerwiseOptions opt = o.train;
      opt.scales.lr = static_cast<float>(o.train.scales.lr * mult);
      opt.gains.lr = static_cast<float>(o.train.gains.lr * mult);
      opt.signs.lr = static_cast<float>(o.train.signs.lr * mult);
      const double loss = forward_backward(student, window(x_dev, s), window(y_dev, s), T, *buffers, state);
      if constexpr (std::is_same_v<Student, StudentLlamaBlock<float>>)
        if (o.hooks.after_backward) o.hooks.after_backward(student, step);
      const StepReport r = finish_step(student, loss, state, opt);
      mem.synchronize();
      train_seconds += since(t_step);
      block_log.losses.push_back(r.loss);
      block_log.flips += r.flips;
      block_log.skipped += r.skipped ? 1 : 0;
      rec = StepRecord{.step = step,
                       .loss = r.loss,
                       .lr = opt.scales.lr,
                       .scale = r.grad_scale,
                       .flips = r.flips,
                       .skipped = r.skipped,
                       .tokens = rec.tokens + rows,
                       .seconds = train_seconds,
                       .block_loss = {}};
      log.write(rec);
      progress.step(rec);
      if (s + 1 == o.steps) {
        // The block is trained: into the model, and a checkpoint at the next block's start.
        keep(student.download());
        checkpoint(b + 1, 0, nullptr, {});
      } else if (o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) {
        checkpoint(b, s + 1, &state, student.download_state());
      }
      if constexpr (std::is_same_v<Student, StudentLlamaBlock<float>>)
        if (o.hooks.after_step) o.hooks.after_step(student, rec);
      if (o.hooks.on_step) o.hooks.on_step(rec);
    }
  };
  // A trained gain at step 0: the --init file's, or the teacher's.
  const auto start_gain = [&](const std::string& name) {
    if (from)
      if (const auto it = from->gains.find(name); it != from->gains.end()) return it->second;
    return weights.at(name).values;
  };
  // Block b's student at initialisation (Llama; a hybrid's is hybrid_init),
  // and a trained block into run.trained / run.trained_gains.
  const auto llama_init = [&](index_t b) {
    const std::string prefix = fmt::format("blk.{}.", b);
    StudentBlockWeights w0;
    for (model::LlamaProj p : model::kAllLlamaProjs)
      w0.proj[static_cast<std::size_t>(p)] = init_blr.at(prefix + model::llama_proj_name(p));
    for (auto [name, field] : trained_gains(w0)) *field = start_gain(prefix + name);
    return w0;
  };
  // A hybrid block's student at initialisation, its gains the --init file's when given.
  const auto hybrid_init = [&](index_t b) {
    const std::string prefix = fmt::format("blk.{}.", b);
    StudentHybridWeights w = hybrid_student_weights(weights, b, init_blr);
    if (from)
      for (auto [name, field] : trained_gains(w)) *field = start_gain(prefix + name);
    return w;
  };
  const auto keep_llama = [&](index_t b, const StudentBlockWeights& w) {
    const std::string prefix = fmt::format("blk.{}.", b);
    for (model::LlamaProj p : model::kAllLlamaProjs)
      run.trained[prefix + model::llama_proj_name(p)] = w.proj[static_cast<std::size_t>(p)];
    for (auto [name, field] : trained_gains(w)) run.trained_gains[prefix + name] = *field;
  };
  const auto keep_hybrid = [&](index_t b, const StudentHybridWeights& w) {
    const std::string prefix = fmt::format("blk.{}.", b);
    for (model::HybridProj p : model::hybrid_block_projs(w.full_attention))
      if (hybrid_proj_is_blr(p)) run.trained[prefix + model::hybrid_proj_name(p)] = w.proj[static_cast<std::size_t>(p)];
    for (auto [name, field] : trained_gains(w)) run.trained_gains[prefix + name] = *field;
  };
  for (index_t b = first_block; b < L && !e2e; ++b) {
    teacher_block(b);  // the targets: the teacher block on the teacher's inputs
    const auto sign_id = static_cast<std::uint32_t>(b) * 64u;
    if (hybrid) {
      StudentHybridBlock<float> student(be, hybrid_teacher->block_dims(), hybrid_init(b), o.train.signs.optimizer, o.tau,
                                        sign_id);
      train_block(b, student, [&](const StudentHybridWeights& w) { keep_hybrid(b, w); });
    } else {
      StudentLlamaBlock<float> student(be, dims, llama_init(b), o.train.signs.optimizer, o.tau, sign_id);
      train_block(b, student, [&](const StudentBlockWeights& w) { keep_llama(b, w); });
    }
    next_block();  // the teacher's outputs are the next block's inputs
  }
  // End to end: every block at once from the initialisation, KL on the
  // logits + (λ/T)·Σ block MSE (train/e2e.hpp), `steps` steps over the same
  // windows the layer-wise objective would use. One log entry per step;
  // the curve is the whole model's loss. Checkpoints every
  // checkpoint_every steps (the whole student's state) and when done (the
  // trained model); a resume of a finished run goes straight to the save.
  // `keep` takes a trained block's weights (as for the layer-wise objective).
  const GradScalerOptions e2e_scaler = e2e_scaler_options(rows);
  const auto train_e2e = [&]<class Student>(E2eTrainerOf<Student>& trainer, auto&& keep) {
    constexpr bool dense = std::is_same_v<Student, StudentLlamaBlock<float>>;  // the e2e_ hooks' family
    if (first_step > 0) {
      trainer.upload_state(run.student_state);
      run.student_state = {};
      trainer.state().applied_steps = run.trainer.applied_steps;
      trainer.state().scaler = GradScaler(e2e_scaler, run.trainer.scaler);
    } else {
      run.blocks.emplace_back();
    }
    CompressBlockLog& lg = run.blocks.back();
    for (std::int64_t s = first_step; s < o.steps; ++s) {
      const auto t_step = Clock::now();
      const double mult = schedule.lr(s);
      LayerwiseOptions& opt = trainer.options().optim;
      opt = o.train;
      opt.scales.lr = static_cast<float>(o.train.scales.lr * mult);
      opt.gains.lr = static_cast<float>(o.train.gains.lr * mult);
      opt.signs.lr = static_cast<float>(o.train.signs.lr * mult);
      const E2eLoss loss = trainer.forward_backward(
          std::span<const std::int32_t>(step_ids).subspan(static_cast<std::size_t>(s * rows),
                                                          static_cast<std::size_t>(rows)),
          T);
      if constexpr (dense)
        if (o.hooks.e2e_after_backward) o.hooks.e2e_after_backward(trainer, s);
      const E2eReport r = trainer.finish_step(loss);
      mem.synchronize();
      train_seconds += since(t_step);
      lg.losses.push_back(r.loss.total);
      lg.flips += r.step.flips;
      lg.skipped += r.step.skipped ? 1 : 0;
      rec = StepRecord{.step = s,
                       .loss = r.loss.total,
                       .lr = opt.scales.lr,
                       .scale = r.step.grad_scale,
                       .flips = r.step.flips,
                       .skipped = r.step.skipped,
                       .tokens = rec.tokens + rows,
                       .seconds = train_seconds,
                       .block_loss = {r.loss.kl, r.loss.mse}};
      log.write(rec);
      progress.step(rec);
      if (s + 1 == o.steps) {
        // Trained: into the model, and the checkpoint of a finished run.
        const auto trained_w = trainer.download();
        for (index_t b = 0; b < L; ++b) keep(b, trained_w.blocks[static_cast<std::size_t>(b)]);
        run.trained_gains[kFinalNorm] = trained_w.final_norm;
        checkpoint(1, 0, nullptr, {});
      } else if (o.checkpoint_every > 0 && (s + 1) % o.checkpoint_every == 0) {
        checkpoint(0, s + 1, &trainer.state(), trainer.download_state());
      }
      if constexpr (dense)
        if (o.hooks.e2e_after_step) o.hooks.e2e_after_step(trainer, rec);
      if (o.hooks.on_step) o.hooks.on_step(rec);
    }
  };
  if (e2e && first_block == 0) {
    const E2eOptions e2e_options{o.train, o.mse_weight};
    if (hybrid) {
      HybridE2eStudentWeights init_w;
      for (index_t b = 0; b < L; ++b) init_w.blocks.push_back(hybrid_init(b));
      if (from) init_w.final_norm = start_gain(kFinalNorm);  // else the teacher's
      HybridE2eTrainer<float> trainer(*hybrid_teacher, init_w, e2e_scaler, e2e_options, o.train.signs.optimizer, o.tau,
                                      streaming.stream);
      train_e2e(trainer, keep_hybrid);
    } else {
      E2eStudentWeights init_w;
      for (index_t b = 0; b < L; ++b) init_w.blocks.push_back(llama_init(b));
      if (from) init_w.final_norm = start_gain(kFinalNorm);  // else the teacher's
      E2eTrainer<float> trainer(*llama_teacher, init_w, e2e_scaler, e2e_options, o.train.signs.optimizer, o.tau,
                                streaming.stream);
      train_e2e(trainer, keep_llama);
    }
  }
  progress.finish();
  std::vector<PlotSeries> curves;
  nlohmann::ordered_json blocks = nlohmann::ordered_json::array();
  std::int64_t flips_total = 0, skipped_total = 0;
  for (std::size_t b = 0; b < run.blocks.size(); ++b) {
    const CompressBlockLog& bl = run.blocks[b];
    PlotSeries curve{e2e ? std::string("KL + (λ/T)·hidden MSE") : fmt::format("block {}", b), {}, {}};
    for (std::size_t s = 0; s < bl.losses.size(); ++s) {
      curve.x.push_back(static_cast<double>(s));
      curve.y.push_back(bl.losses[s]);
    }
    curves.push_back(std::move(curve));
    blocks.push_back(
        {{"block", b}, {"first_loss", bl.losses.front()}, {"last_loss", bl.losses.back()}, {"flips", bl.flips}});
    flips_total += bl.flips;
    skipped_total += bl.skipped;
  }
  write_plot_svg(plot_path, curves,
                 {.title = e2e ? "end-to-end loss" : "layer-wise loss per block",
                  .x_label = "step",
                  .y_label = e2e ? "KL + (λ/T)·MSE" : "MSE",
                  .log_y = true});

  // 4. The compressed model: save, read back, measure.
  io::CompressedModel cm;
  cm.config = cfg;
  cm.tokenizer = tokenizer.spec();
  cm.storage = io::Storage{.scales = io::StoredFloat::f16, .dense = io::StoredFloat::f16};
  std::set<std::string> compressed;  // the tensor names the BLR matrices replace
  for (const blr::RankPlan& p : plan) compressed.insert(weight_name(p.name));
  for (const auto& [name, t] : weights.tensors) {
    if (compressed.contains(name)) continue;
    const auto g = run.trained_gains.find(name);
    if (g != run.trained_gains.end())
      cm.dense.emplace(name, model::HostTensor{t.shape, g->second});
    else if (from && from->gains.contains(name))  // a gain this objective does not train (layer-wise: the final norm)
      cm.dense.emplace(name, model::HostTensor{t.shape, from->gains.at(name)});
    else
      cm.dense.emplace(name, t);
  }
  cm.blr = std::move(run.trained);
  nlohmann::ordered_json summary;
  summary["model"] = weights.source;
  summary["family"] = std::string(io::model_family_name(cfg.family));
  summary["device"] = o.device;
  summary["objective"] = o.objective;
  if (from)
    summary["init"] = o.init.string();  // the ranks are the file's: no target
  else
    summary["target_bpw"] = o.bpw;
  if (!o.bpw_overrides.empty()) {
    nlohmann::ordered_json ov = nlohmann::ordered_json::array();
    for (const blr::BpwOverride& b : o.bpw_overrides) ov.push_back({{"pattern", b.pattern}, {"bpw", b.bpw}});
    summary["bpw_overrides"] = ov;
  }
  summary["paths"] = o.paths;
  summary["training_text"] = train_text.name;
  summary["steps_per_block"] = o.steps;
  summary["seq_len"] = T;
  summary["windows_per_step"] = nb;
  summary["seed"] = o.seed;
  nlohmann::ordered_json ranks;
  for (std::size_t i = 0; i < plan.size(); ++i)
    ranks[plan[i].name] = {{"rank", plan[i].rank}, {"init_rel_error", init_error[i]}};
  summary["matrices"] = ranks;
  summary["blocks"] = blocks;
  summary["perplexity"] = run.perplexity;
  if (resumed) summary["resumed_at_step"] = resume_step;
  cm.summary = summary;
  save_bitrank(o.out, cm);

  // Training is over: the teacher and the training buffers give their device
  // memory back before the student is read (under a cap both would not fit).
  teacher_model.reset();
  bufs = {};
  hybrid_bufs = {};
  x_dev = {};
  y_dev = {};
  Perplexity ppl_student;
  {
    const io::CompressedModel saved = io::load_bitrank(o.out);
    model::HostWeights dense{saved.config, o.out.string(), saved.dense};
    const std::unique_ptr<model::DecoderModel<float>> student =
        model::make_model(be, dense, saved.blr, streaming.stream);
    ppl_student = perplexity(*student, eval_span, o.eval_seq_len, eval_windows, "trained student");
  }
  // Layer-wise: each step pushes rows tokens through one block; e2e: through the whole model.
  const double block_tokens = static_cast<double>(e2e ? N : L * N);
  cm.summary["perplexity"]["student"] = ppl_json(ppl_student);
  cm.summary["training"] = {{"seconds", train_seconds},
                            {"block_tokens", e2e ? N : L * N},
                            {"tokens_per_s", block_tokens / train_seconds},
                            {"model_tokens_per_s", static_cast<double>(N) / train_seconds},
                            {"sign_flips", flips_total},
                            {"skipped_steps", skipped_total}};
  cm.summary["init_seconds"] = run.init_seconds;
  cm.summary["init_svd"] = svd_where;  // where this run's Dual-SVID SVDs ran
  const std::size_t peak = be.memory->peak_bytes();
  cm.summary["peak_device_memory_bytes"] = peak ? nlohmann::ordered_json(peak) : nlohmann::ordered_json(nullptr);
  cm.summary["device_memory_cap_bytes"] =
      o.device_memory_cap ? nlohmann::ordered_json(o.device_memory_cap) : nlohmann::ordered_json(nullptr);
  cm.summary["streaming"] = streaming.stream;
  cm.summary["streaming_reason"] = streaming.reason;
  cm.summary["seconds"] = since(t_start);
  save_bitrank(o.out, cm);  // the same tensors; the summary now holds the student's figures
  // The model is complete: the checkpoint has served (a kill before this line resumes into the save).
  std::filesystem::remove(ckpt_path);
  cm.summary["accounting"] = io::bitrank_accounting(cm);
  cm.summary["file"] = o.out.string();
  cm.summary["file_bytes"] = std::filesystem::file_size(o.out);
  cm.summary["log"] = log_path.string();
  cm.summary["plot"] = plot_path.string();
  return cm.summary;
}

}  // namespace bitrank::train
