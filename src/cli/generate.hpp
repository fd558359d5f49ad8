// `bitrank generate`: text from a model after a prompt, streamed to stdout.
#pragma once

#include <cstdint>
#include <string>

namespace bitrank::cli {

struct GenerateCliOptions {
  std::string model;         // .gguf, Hugging Face directory or .bitrank; empty: the configured default
  std::string prompt;
  long max_tokens = 64;
  double temperature = 0;    // 0: greedy
  long top_k = 0;            // 0: all tokens
  double top_p = 1;
  std::uint64_t seed = 0;
  std::string device = "cpu";
  bool stop_at_eos = true;   // stop after the tokenizer's EOS (not printed)
  bool no_cache = false;     // a whole forward per new token instead of the KV cache
};

int run_generate(const GenerateCliOptions& options);

}  // namespace bitrank::cli
