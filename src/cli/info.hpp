// `bitrank info FILE`: what a model holds, as text or, with --json, as one
// JSON object. A bitrank file: architecture, BLR matrices with their bits
// per weight, totals, training summary (store/bitrank_format.hpp describes
// both). A GGUF file or a Hugging Face directory: architecture (with its
// context), tokenizer, tensor count and types, parameters. Anything else: an
// error saying it is not a model file (io/model_file.hpp).
#pragma once

#include <string>

namespace bitrank::cli {

struct InfoOptions {
  std::string file;
  bool json = false;
};

int run_info(const InfoOptions& options);

}  // namespace bitrank::cli
