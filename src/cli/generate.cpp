// `bitrank generate`: loads a model and its tokenizer (store/load.hpp,
// io::load_model_tokenizer: a GGUF, a Hugging Face directory or a bitrank
// file; the default model is eval's, cli/inputs.hpp), turns the prompt into
// ids (model::encode_prompt: control tokens matched, BOS as the tokenizer
// says) and generates (model/generate.hpp: a prefill of the prompt into a
// KV cache, then one token per step; --no-cache: a whole forward per new
// token). stdout gets the generated text only, each piece written and
// flushed as soon as its UTF-8 is complete (model::TextStream), then a
// newline; the EOS that ends generation is not printed. stderr gets two
// lines: once loaded, the model's resident weights (DecoderModel::
// weight_bytes) beside the checkpoint's bytes on disk and the process's
// resident memory; at the end, prompt tokens, generated tokens, seconds,
// prefill tokens/s (prompt tokens over the first step), decode tokens/s (the
// later steps), load time.
//
// --device cpu or cuda (cli/device.hpp), as eval.
#include "cli/generate.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bitrank/error.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/memory.hpp"
#include "bitrank/model/generate.hpp"
#include "bitrank/store/load.hpp"
#include "cli/device.hpp"
#include "cli/inputs.hpp"

namespace bitrank::cli {
namespace {

// The bytes of a checkpoint on disk: the file, or every file of a directory.
std::uintmax_t file_bytes(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path)) return std::filesystem::file_size(path);
  std::uintmax_t sum = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(path))
    if (e.is_regular_file()) sum += e.file_size();
  return sum;
}

}  // namespace

int run_generate(const GenerateCliOptions& o) {
  const std::string model_path = model_or_default(o.model, "generate");
  model::GenerateOptions options;
  options.max_tokens = o.max_tokens;
  options.sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .seed = o.seed};
  options.use_cache = !o.no_cache;
  model::check_generate_options(options);  // before anything is loaded
  if (o.prompt.empty()) fail("generate: --prompt is empty: give the text to continue");
  const std::unique_ptr<Backend<float>> be = make_device_backend("generate", o.device);

  const auto t_load = std::chrono::steady_clock::now();
  const io::Tokenizer tokenizer = io::load_model_tokenizer(model_path);
  const std::vector<std::int32_t> prompt = model::encode_prompt(tokenizer, o.prompt);
  const auto net = store::load_model(*be, model_path);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  fmt::print(stderr, "generate: weights {} resident ({} bytes; the file {} bytes), process {} resident after load\n",
             format_bytes(net->weight_bytes()), net->weight_bytes(), file_bytes(model_path),
             format_bytes(process_resident_bytes()));

  const std::int32_t eos = tokenizer.spec().eos_id;
  options.stop_id = o.stop_at_eos ? eos : -1;
  model::TextStream stream(tokenizer);
  const auto write = [](const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  const model::GenerateResult r = model::generate(*net, prompt, options, [&](std::int32_t id) {
    if (!(o.stop_at_eos && id == eos)) write(stream.push(id));
  });
  write(stream.finish() + "\n");
  fmt::print(stderr,
             "generate: {} prompt tokens, {} generated tokens{} in {:.2f} s: prefill {:.1f} tokens/s, decode {:.1f} "
             "tokens/s ({}; {}, {}; loaded in {:.1f} s)\n",
             prompt.size(), r.tokens.size(), r.stopped ? " (stopped at EOS)" : "", r.seconds, r.prefill_tokens_per_s(),
             r.decode_tokens_per_s(), options.use_cache ? "KV cache" : "no cache", model_path, o.device, load_s);
  return 0;
}

}  // namespace bitrank::cli
