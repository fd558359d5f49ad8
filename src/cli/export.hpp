// `bitrank export --model M.bitrank -o DIR`: a compressed model as a dense
// Hugging Face directory that transformers and lm-eval load
// (store/hf_export.hpp); prints one JSON line (model, out, dtype, tensors,
// params, BLR matrices expanded, files, bytes, seconds).
#pragma once

#include <string>

namespace bitrank::cli {

struct ExportOptions {
  std::string model;      // the .bitrank file
  std::string out;        // the directory to write
  std::string dtype = "f32";  // f32, bf16 or f16
  std::string tokenizer;  // a model file whose tokenizer to write instead of (or for want of) the model's
  bool force = false;     // write over the export's files in a non-empty directory
};

int run_export(const ExportOptions& options);

}  // namespace bitrank::cli
