// `bitrank compress --diagnose`: where the initialisation's error comes
// from, measured instead of trained (compress.hpp). After the prepare and
// initialise stages, the perplexity of the teacher with
//   - one block's projections replaced by their initialisation, each block
//     in turn, and
//   - one projection kind (attn_q, …, ffn_down) replaced in every block,
// over the run's evaluation windows, beside the per-matrix weight and output
// errors (the output error weights the weight error by the rms of each input
// column on the calibration windows: the error of x·Ŵᵀ for inputs with
// uncorrelated columns). Nothing is trained or saved.
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <set>

#include "bitrank/model/make.hpp"
#include "train/compress_run.hpp"

namespace bitrank::train {
namespace {

// The teacher with the matrices named by `keep` replaced.
double replaced_ppl(CompressRun& run, const std::function<bool(const std::string&)>& keep, const std::string& what) {
  model::BlrProjections some;
  for (const auto& [name, m] : run.init_blr)
    if (keep(name)) some.emplace(name, m);
  const auto model = model::make_model(run.be, run.weights, some, run.streaming.stream);
  return perplexity(*model, run.eval_ids, run.o.eval_seq_len, run.eval_windows, what.c_str()).ppl;
}

}  // namespace

nlohmann::ordered_json diagnose_initialisation(CompressRun& run) {
  nlohmann::ordered_json out;
  out["model"] = run.weights.source;
  out["init_method"] = run.o.init_method;
  out["target_bpw"] = run.o.bpw;
  out["paths"] = run.o.paths;
  out["eval_windows"] = run.eval_windows;
  out["perplexity"] = run.ckpt.perplexity;
  nlohmann::ordered_json matrices;
  for (std::size_t i = 0; i < run.plan.size(); ++i) {
    matrices[run.plan[i].name] = {{"rank", run.plan[i].rank}, {"weight_error", run.init_error[i]}};
    if (std::isfinite(run.init_output_error[i])) matrices[run.plan[i].name]["output_error"] = run.init_output_error[i];
  }
  out["matrices"] = matrices;
  nlohmann::ordered_json blocks = nlohmann::ordered_json::array();
  for (index_t b = 0; b < run.cfg().num_layers; ++b) {
    const std::string prefix = fmt::format("blk.{}.", b);
    blocks.push_back(replaced_ppl(run, [&](const std::string& n) { return n.starts_with(prefix); },
                                  fmt::format("block {} replaced", b)));
  }
  out["ppl_one_block_replaced"] = blocks;
  nlohmann::ordered_json kinds;
  std::set<std::string> names;
  for (const blr::RankPlan& p : run.plan) names.insert(p.name.substr(p.name.find('.', 4) + 1));
  for (const std::string& kind : names)
    kinds[kind] = replaced_ppl(run, [&](const std::string& n) { return n.ends_with("." + kind); },
                               fmt::format("{} replaced", kind));
  out["ppl_one_kind_replaced"] = kinds;
  return out;
}

}  // namespace bitrank::train
