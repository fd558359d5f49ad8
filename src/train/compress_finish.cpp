// The last stage of `bitrank compress` (compress_run.hpp): the loss plot,
// the compressed model assembled (scales f16, dense tensors f16), its file
// image read back and its perplexity measured as a user gets it, then the
// file written once with the summary in its metadata (also returned), and
// the checkpoint removed.
#include <fmt/format.h>

#include <set>

#include "bitrank/model/make.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "bitrank/train/plot.hpp"
#include "train/objective.hpp"

namespace bitrank::train {
namespace {

// The tensors: the BLR matrices trained, every other teacher tensor (a trained gain replaced by its value).
store::CompressedModel assemble(CompressRun& run) {
  store::CompressedModel cm;
  cm.config = run.cfg();
  cm.tokenizer = run.tokenizer->spec();
  cm.storage = store::Storage{.scales = store::StoredFloat::f16, .dense = store::StoredFloat::f16};
  std::set<std::string> compressed;  // the tensor names the BLR matrices replace
  for (const blr::RankPlan& p : run.plan) compressed.insert(p.name + ".weight");
  for (const auto& [name, t] : run.weights.tensors) {
    if (compressed.contains(name)) continue;
    const auto g = run.ckpt.trained_gains.find(name);
    if (g != run.ckpt.trained_gains.end())
      cm.dense.emplace(name, model::HostTensor{t.shape, g->second});
    else if (run.from && run.from->gains.contains(name))  // a gain this objective does not train (layer-wise: the final norm)
      cm.dense.emplace(name, model::HostTensor{t.shape, run.from->gains.at(name)});
    else
      cm.dense.emplace(name, t);
  }
  cm.blr = std::move(run.ckpt.trained);
  store::record_exact_q8_0(cm);  // the teacher's Q8_0 tensors (a GGUF's), stored as their blocks
  return cm;
}

// What the run was: its options (the checkpoint's record of them), what it
// started from, ranks and per-matrix init errors, block logs, starting perplexities.
nlohmann::ordered_json run_summary(const CompressRun& run, nlohmann::ordered_json blocks) {
  const CompressOptions& o = run.o;
  nlohmann::ordered_json s;
  s["model"] = run.weights.source;
  s["family"] = std::string(io::model_family_name(run.cfg().family));
  s["device"] = o.device;
  s["hardware"] = run.be.hardware;
  s["objective"] = o.objective;
  s["init_method"] = run.from ? std::string("file") : o.init_method;  // "file": the ranks are --init's, no bpw target
  s["training_text"] = run.train_text.name;
  s["options"] = compress_options_json(o);
  nlohmann::ordered_json ranks;
  for (std::size_t i = 0; i < run.plan.size(); ++i) {
    ranks[run.plan[i].name] = {{"rank", run.plan[i].rank}, {"init_rel_error", run.init_error[i]}};
    if (std::isfinite(run.init_output_error[i])) ranks[run.plan[i].name]["init_output_error"] = run.init_output_error[i];
  }
  s["matrices"] = ranks;
  s["blocks"] = std::move(blocks);
  s["perplexity"] = run.ckpt.perplexity;
  if (run.resumed) s["resumed_at_step"] = run.first_block * o.steps + run.first_step;
  return s;
}

void write_loss_plot(const CompressRun& run, const Objective& objective, nlohmann::ordered_json& blocks,
                     std::int64_t& flips, std::int64_t& skipped) {
  std::vector<PlotSeries> curves;
  blocks = nlohmann::ordered_json::array();
  for (std::size_t b = 0; b < run.ckpt.blocks.size(); ++b) {
    const CompressBlockLog& bl = run.ckpt.blocks[b];
    PlotSeries curve{objective.curve_label(b), {}, {}};
    for (std::size_t s = 0; s < bl.losses.size(); ++s) {
      curve.x.push_back(static_cast<double>(s));
      curve.y.push_back(bl.losses[s]);
    }
    curves.push_back(std::move(curve));
    blocks.push_back(
        {{"block", b}, {"first_loss", bl.losses.front()}, {"last_loss", bl.losses.back()}, {"flips", bl.flips}});
    flips += bl.flips;
    skipped += bl.skipped;
  }
  write_plot_svg(run.plot_path, curves,
                 {.title = objective.plot_title(), .x_label = "step", .y_label = objective.loss_label(), .log_y = true});
}

}  // namespace

nlohmann::ordered_json finish_run(CompressRun& run, const Objective& objective) {
  const CompressOptions& o = run.o;
  nlohmann::ordered_json blocks;
  std::int64_t flips = 0, skipped = 0;
  write_loss_plot(run, objective, blocks, flips, skipped);
  store::CompressedModel cm = assemble(run);
  cm.summary = run_summary(run, std::move(blocks));

  // Training is over: the teacher gives its device memory back before the
  // student is read (under a cap both would not fit).
  run.teacher.reset();
  run.llama_teacher = nullptr;
  run.hybrid_teacher = nullptr;
  Perplexity student;
  {
    // The student measured is the file's image read back (f16 scales and
    // dense tensors, as a user loads it); the file is written once, below,
    // with the same tensors and the finished summary.
    const std::vector<std::byte> image = store::bitrank_image(cm);
    const store::CompressedModel saved = store::load_bitrank(image, o.out.string());
    model::HostWeights dense{saved.config, o.out.string(), saved.dense, {}};
    const std::unique_ptr<model::DecoderModel<float>> m =
        model::make_model(run.be, dense, saved.blr, run.streaming.stream);
    student = perplexity(*m, run.eval_ids, o.eval_seq_len, run.eval_windows, "trained student");
  }
  // Layer-wise: each step pushes rows tokens through one block; e2e: through the whole model.
  const std::int64_t N = o.steps * run.rows();
  const std::int64_t block_tokens = o.objective == "e2e" ? N : run.cfg().num_layers * N;
  cm.summary["perplexity"]["student"] = ppl_json(student);
  cm.summary["training"] = {{"seconds", run.train_seconds},
                            {"block_tokens", block_tokens},
                            {"tokens_per_s", static_cast<double>(block_tokens) / run.train_seconds},
                            {"model_tokens_per_s", static_cast<double>(N) / run.train_seconds},
                            {"sign_flips", flips},
                            {"skipped_steps", skipped}};
  cm.summary["init_seconds"] = run.ckpt.init_seconds;
  cm.summary["init_svd"] = run.svd_where;  // where this run's SVDs ran
  const std::size_t peak = run.be.memory->peak_bytes();
  cm.summary["peak_device_memory_bytes"] = peak ? nlohmann::ordered_json(peak) : nlohmann::ordered_json(nullptr);
  cm.summary["device_memory_cap_bytes"] =
      o.device_memory_cap ? nlohmann::ordered_json(o.device_memory_cap) : nlohmann::ordered_json(nullptr);
  cm.summary["streaming"] = run.streaming.stream;
  cm.summary["streaming_reason"] = run.streaming.reason;
  cm.summary["seconds"] = seconds_since(run.t_start);
  save_bitrank(o.out, cm);
  // The model is complete: the checkpoint has served (a kill before this line resumes into the save).
  std::filesystem::remove(run.ckpt_path);
  cm.summary["accounting"] = store::bitrank_accounting(cm);
  cm.summary["file"] = o.out.string();
  cm.summary["file_bytes"] = std::filesystem::file_size(o.out);
  cm.summary["log"] = run.log_path.string();
  cm.summary["plot"] = run.plot_path.string();
  return cm.summary;
}

}  // namespace bitrank::train
