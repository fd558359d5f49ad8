// `bitrank tokenize`: text → a token id file (io/token_file.hpp).
#pragma once

#include <string>

namespace bitrank::cli {

struct TokenizeOptions {
  std::string model;           // .gguf whose tokenizer is used; empty: the configured default
  std::string split = "train"; // corpus part when no --text: train or eval
  std::string text;            // a text file instead of the corpus
  std::string out;             // the token id file to write
};

int run_tokenize(const TokenizeOptions& options);

}  // namespace bitrank::cli
