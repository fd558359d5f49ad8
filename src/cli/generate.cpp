// `bitrank generate`: loads a model and its tokenizer (model/load.hpp,
// io::load_model_tokenizer: a GGUF, a Hugging Face directory or a bitrank
// file; the default model is eval's, cli/inputs.hpp), turns the prompt into
// ids (model::encode_prompt: control tokens matched, BOS as the tokenizer
// says) and generates (model/generate.hpp: a prefill of the prompt into a
// KV cache, then one token per step; --no-cache: a whole forward per new
// token). stdout gets the generated text only, each piece written and
// flushed as soon as its UTF-8 is complete (model::TextStream), then a
// newline; the EOS that ends generation is not printed. stderr gets one
// line: prompt tokens, generated tokens, seconds, prefill tokens/s (prompt
// tokens over the first step), decode tokens/s (the later steps), load time.
//
// --device cpu or cuda (cli/device.hpp), as eval.
#include "cli/generate.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "bitrank/error.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/generate.hpp"
#include "bitrank/model/load.hpp"
#include "cli/device.hpp"
#include "cli/inputs.hpp"

namespace bitrank::cli {

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
  const model::LoadedWeights loaded = model::load_any(model_path);
  const auto net = model::make_model(*be, loaded.weights, loaded.blr);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();

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
