// What the subcommands that read text share (`bitrank eval`, `bitrank
// tokenize`): the default model and text → token ids with the model's own
// tokenizer, from a file or from a part of the default corpus.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bitrank/io/hf_config.hpp"

namespace bitrank::cli {

// `model`, or the SmolLM2 GGUF found when bitrank was configured; Error
// naming `command` when neither exists.
std::string model_or_default(const std::string& model, std::string_view command);

// Error "<command>: <option> <seq_len> exceeds the model's context of N
// positions (max_position_embeddings)" when the config gives a context
// (max_position_embeddings > 0) and seq_len is past it.
void check_seq_len_fits(std::string_view command, std::string_view option, long long seq_len,
                        const io::ModelConfig& config);

// Error "<command>: cannot write <option> <path>: …" when the directory the
// file would go to does not exist, is not a directory or is not writable,
// or the path is a directory: checked before any work, not after it.
void check_output_path(std::string_view command, std::string_view option, const std::string& path);

// A window length the user did not give: `fallback`, or the model's context
// when that is shorter.
long long default_seq_len(long long fallback, const io::ModelConfig& config);

enum class CorpusPart { train, eval };

struct TextIds {
  std::vector<std::int32_t> ids;
  std::string name;         // the text file, or which corpus part
  std::size_t text_bytes = 0;
};

// The ids of `text_file`, or of the corpus part when it is empty, encoded
// by the model's tokenizer (io::load_model_tokenizer: a Hugging Face
// directory's tokenizer.json or a GGUF's tokenizer.ggml.* metadata). No special tokens are matched or added: plain text.
TextIds tokenize_text(const std::string& model, const std::string& text_file, CorpusPart part);

}  // namespace bitrank::cli
