// `bitrank eval`: perplexity of a model over non-overlapping windows of text.
#pragma once

#include <string>

namespace bitrank::cli {

struct EvalOptions {
  std::string model;     // .gguf file or Hugging Face directory; empty: the configured default
  std::string text;      // text file; empty: the evaluation split of the default corpus
  std::string ids;       // instead of text: a file of whitespace-separated token ids
  long seq_len = 512;    // T: tokens per window
  bool seq_len_given = false;  // --seq-len on the command line (else 512, or the model's context when shorter)
  long max_windows = 0;  // 0: all windows
  std::string device = "cpu";
  std::string device_memory_cap;  // --device-memory-cap: bytes, or <n>GiB / <n>MiB; empty: none
  bool stream = false, no_stream = false;  // --stream / --no-stream (neither: automatic)
};

int run_eval(const EvalOptions& options);

}  // namespace bitrank::cli
