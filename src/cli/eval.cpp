// `bitrank eval`: loads a model, turns the text into token ids, cuts them
// into non-overlapping windows of T tokens (a tail shorter than T is
// dropped) and reports the perplexity exp(Σ NLL / predictions), each window
// predicting its tokens 1..T−1 from their prefixes. Progress (windows,
// tokens/s) goes to stderr, a JSON summary to stdout.
//
// The default model and text → ids are shared with `bitrank tokenize`
// (cli/inputs.hpp): the default text is the corpus's evaluation split.
#include "cli/eval.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "bitrank/backend.hpp"
#include "bitrank/error.hpp"
#include "bitrank/model/model.hpp"
#include "cli/inputs.hpp"

namespace bitrank::cli {
namespace {

std::vector<std::int32_t> read_ids(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("eval: cannot read the id file {}", path);
  std::vector<std::int32_t> ids;
  long long v = 0;
  while (in >> v) {
    if (v < 0 || v > INT32_MAX) fail("eval: {}: token id {} out of range", path, v);
    ids.push_back(static_cast<std::int32_t>(v));
  }
  if (!in.eof()) fail("eval: {}: not a list of integers after {} ids", path, ids.size());
  return ids;
}

}  // namespace

int run_eval(const EvalOptions& o) {
  const std::string model_path = model_or_default(o.model, "eval");
  if (o.device != "cpu") fail("eval: device '{}' is not supported yet (cpu)", o.device);
  if (o.seq_len < 2) fail("eval: --seq-len must be at least 2, got {}", o.seq_len);

  std::vector<std::int32_t> ids;
  std::string text_name;
  if (!o.ids.empty()) {
    ids = read_ids(o.ids);
    text_name = o.ids;
  } else {
    auto text_ids = tokenize_text(model_path, o.text, CorpusPart::eval);
    ids = std::move(text_ids.ids);
    text_name = std::move(text_ids.name);
  }

  const auto t_load = std::chrono::steady_clock::now();
  const model::HostWeights weights = model::load_gguf_weights(model_path);
  auto be = make_cpu_backend();
  const model::LlamaModel<float> net(*be, weights);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();

  const index_t T = o.seq_len;
  index_t windows = static_cast<index_t>(ids.size()) / T;
  if (o.max_windows > 0) windows = std::min<index_t>(windows, o.max_windows);
  if (windows == 0) fail("eval: {} tokens do not fill one window of {}", ids.size(), T);

  const auto t0 = std::chrono::steady_clock::now();
  double nll = 0;
  std::int64_t predictions = 0;
  for (index_t w = 0; w < windows; ++w) {
    const auto r = net.nll(std::span<const std::int32_t>(ids.data() + w * T, static_cast<std::size_t>(T)), T);
    nll += r.sum;
    predictions += r.count;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\reval: window %lld/%lld  %.0f tokens/s  ppl %.3f", static_cast<long long>(w + 1),
                 static_cast<long long>(windows), static_cast<double>((w + 1) * T) / s,
                 std::exp(nll / static_cast<double>(predictions)));
    std::fflush(stderr);
  }
  std::fprintf(stderr, "\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::ordered_json j;
  j["model"] = model_path;
  j["text"] = text_name;
  j["device"] = o.device;
  j["seq_len"] = T;
  j["tokens"] = windows * T;
  j["windows"] = windows;
  j["predictions"] = predictions;
  j["nll"] = nll / static_cast<double>(predictions);
  j["ppl"] = std::exp(nll / static_cast<double>(predictions));
  j["seconds"] = seconds;
  j["tokens_per_s"] = static_cast<double>(windows * T) / seconds;
  j["load_seconds"] = load_s;
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace bitrank::cli
