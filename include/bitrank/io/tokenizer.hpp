// Byte-level BPE tokenizer (GPT-2 style), as Hugging Face `tokenizers` runs
// it for SmolLM2, Qwen2/3 and Llama 3.
//
// encode(text):
//   1. Control (special) tokens are cut out of the raw text when
//      parse_special is set; each remaining span is normalised (NFC where
//      the spec says so) and user-defined tokens are cut out of it, always.
//      At each position the leftmost match wins, the longest among those.
//   2. Each remaining span is split into pre-tokens by the spec's
//      pre-tokenizer kind (hand-written
//      matchers equal to the regexes below, over a table of \p{L}, \p{N} and
//      \s generated from Unicode data).
//   3. Each pre-token's bytes start as one symbol per byte (the token of the
//      byte's GPT-2 unicode stand-in); the adjacent pair of lowest merge rank
//      is merged (leftmost on ties) until no pair has a rank.
//   Invalid UTF-8 is not an error: each bad byte counts as one "other"
//   character to the pre-tokenizer and still encodes as its byte token, so
//   decode(encode(t)) == t for every byte string t when the vocabulary has
//   all 256 byte tokens. A byte without a token is dropped before merging
//   (as `tokenizers` drops what a BPE model without unk token cannot spell;
//   SmolLM2's vocabulary lacks 21 bytes, e.g. 0x04, 0x1D, 0xF5..0xFF).
// decode(ids): each token's text is its byte-level string mapped back to
//   bytes, or, if one of its characters is no byte stand-in (added tokens
//   such as "<user tag>"), its UTF-8 text as is; the result is the raw bytes
//   (no replacement of invalid UTF-8).
//
// The spec is independent of the file format: load_tokenizer_json fills it
// from tokenizer.json, tokenizer_spec_from_gguf from tokenizer.ggml.* keys.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bitrank::io {

// The pre-tokenizer, by the regex it equals. GPT2_RE is
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// QWEN2_RE is
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
enum class PreTokenizer : std::uint8_t {
  gpt2,    // ByteLevel(use_regex): GPT2_RE (GGUF pre "gpt2")
  smollm,  // Digits(individual_digits) then GPT2_RE in each piece (GGUF "smollm")
  qwen2,   // Split(QWEN2_RE, Isolated) then ByteLevel(use_regex=false) (GGUF "qwen2")
  llama3,  // as qwen2 with \p{N}{1,3} (GGUF "llama-bpe")
};
std::string_view pre_tokenizer_name(PreTokenizer kind);

enum class Normalizer : std::uint8_t { none, nfc };

// Numbering of GGUF's tokenizer.ggml.token_type.
enum class TokenType : std::uint8_t {
  normal = 1,
  unknown = 2,
  control = 3,       // special token: matched in raw text only when asked
  user_defined = 4,  // added token: always matched in raw text
  unused = 5,
  byte = 6,
};

struct TokenizerSpec {
  // Token strings in id order. Normal tokens are byte-level strings (each
  // byte written as its GPT-2 unicode stand-in, e.g. "Ġthe"); control and
  // user-defined tokens are their raw text as matched in input.
  std::vector<std::string> tokens;
  std::vector<TokenType> types;  // one per token
  // Merges in rank order (rank 0 first): the two byte-level strings merged.
  std::vector<std::pair<std::string, std::string>> merges;
  PreTokenizer pre = PreTokenizer::gpt2;
  Normalizer normalizer = Normalizer::none;
  bool add_prefix_space = false;  // ByteLevel: prepend ' ' to a piece not starting with one
  bool ignore_merges = false;     // BPE: a pre-token that is itself a token is not merged
  std::int32_t bos_id = -1;       // -1: none
  std::int32_t eos_id = -1;
  bool add_bos = false;  // encode with add_special prepends bos_id
  bool add_eos = false;  // ... and appends eos_id
  bool operator==(const TokenizerSpec&) const = default;
};

// Reads a Hugging Face tokenizer.json (model BPE; merges as "a b" strings or
// ["a", "b"] pairs; pre_tokenizer and normalizer of the kinds above;
// added_tokens; TemplateProcessing post-processor for bos/eos). Anything
// else is a bitrank::Error naming the file and the key.
TokenizerSpec load_tokenizer_json(const std::filesystem::path& path);
TokenizerSpec parse_tokenizer_json(std::string_view json_text, std::string_view source);

// The spec as a Hugging Face tokenizer.json that `tokenizers` and the reader
// above accept: model BPE (vocab: every token but the added ones, in id
// order; merges as ["a", "b"] pairs), added_tokens (control tokens special,
// user-defined ones not), the pre-tokenizer and normalizer of the spec's
// kinds, a ByteLevel decoder, and a TemplateProcessing post-processor when
// add_bos / add_eos. parse_tokenizer_json reads it back equal to the spec
// but for bos_id / eos_id, which tokenizer.json holds only when added (a
// tokenizer_config.json names them: hf_tokenizer_config_json). Error on a
// token that is not valid UTF-8 or a token string that repeats another's
// (tokenizer.json's vocabulary is a map from strings).
std::string tokenizer_spec_to_hf_json(const TokenizerSpec& spec);
// tokenizer_config.json for transformers' PreTrainedTokenizerFast: its
// class, bos / eos tokens (null when the spec has none), add_bos_token /
// add_eos_token, model_max_length (the context; 0: not given).
std::string hf_tokenizer_config_json(const TokenizerSpec& spec, std::int64_t model_max_length);

// TokenizerSpec <-> JSON text, one-to-one (the bitrank format keeps the
// spec in its metadata). Every key is present:
//   {"tokens": ["<s>", "Ġthe", ...], "types": [3, 1, ...] (TokenType numbers),
//    "merges": [["Ġ", "t"], ...] (rank order), "pre": "gpt2" | "smollm" |
//    "qwen2" | "llama3", "normalizer": "none" | "nfc", "add_prefix_space",
//    "ignore_merges", "add_bos", "add_eos": booleans, "bos_id", "eos_id":
//    integers (-1: none)}
// Writing fails (bitrank::Error) on a token that is not valid UTF-8; reading
// fails on a missing, unknown or mistyped key, or a spec the Tokenizer
// refuses (types count, merges naming absent tokens, ids out of range),
// naming `source` and the key.
std::string tokenizer_spec_to_json(const TokenizerSpec& spec);
TokenizerSpec parse_tokenizer_spec_json(std::string_view json_text, const std::string& source);

class GgufFile;
// Reads a GGUF file's tokenizer.ggml.* keys (model "gpt2" = byte-level BPE;
// pre "gpt-2", "smollm", "qwen2", "llama3"/"llama-v3"/"llama-bpe" as
// llama.cpp names them; the key list and mapping are written at the top of
// src/io/tokenizer_gguf.cpp). Anything missing, mistyped, out of range or
// unsupported is a bitrank::Error naming the file and the key.
TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& file);

struct EncodeOptions {
  bool parse_special = false;  // match control tokens in the text
  bool add_special = false;    // add bos/eos as the spec's add_bos/add_eos say
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerSpec spec);  // checks the spec (Error if inconsistent)
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Thread-safe; calls are serialised on the pre-token cache.
  std::vector<std::int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Error on an id out of range. skip_control drops control tokens.
  std::string decode(std::span<const std::int32_t> ids, bool skip_control = false) const;

  const TokenizerSpec& spec() const;
  std::int32_t n_tokens() const;
  std::optional<std::int32_t> token_id(std::string_view token) const;  // by spec string

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The tokenizer of a model as bitrank loads models: a directory's
// tokenizer.json (Hugging Face layout), else a .gguf file's tokenizer.ggml.*
// keys (only the header is read, no tensor data). `bitrank eval` and the
// trainer turn text into ids with it, as plain text: encode(text).
// A bitrank model file (a safetensors file) gives the tokenizer kept in its
// metadata. The kind is told by content (io/model_file.hpp): anything else is
// an Error saying what it is not ("not a GGUF file (bad magic …)").
Tokenizer load_model_tokenizer(const std::filesystem::path& model);
// Whether the file starts with the GGUF magic (false when unreadable).
bool is_gguf_file(const std::filesystem::path& path);

// GPT-2's reversible byte → unicode stand-in map (printable Latin-1 bytes map
// to themselves, the rest to U+0100 onwards), as UTF-8.
std::string byte_to_unicode(std::uint8_t byte);

}  // namespace bitrank::io
