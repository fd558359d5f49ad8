// TokenizerSpec from a GGUF file's tokenizer.ggml.* metadata (byte-level BPE
// only), following what llama.cpp's vocabulary loader reads.
//
// Keys read:
//   tokenizer.ggml.model       string, must be "gpt2" (byte-level BPE)
//   tokenizer.ggml.pre         string, required; llama.cpp's pre-tokenizer
//                              name, mapped as llama.cpp maps it:
//                                "gpt-2"                          → gpt2
//                                "smollm"                         → smollm
//                                "qwen2"                          → qwen2 (+ NFC, as
//                                   Qwen2's tokenizer.json normalises)
//                                "llama3", "llama-v3", "llama-bpe" → llama3
//                                   (+ ignore_merges; add_bos by default)
//                              (llama.cpp gives other names other regexes:
//                              any other name is refused)
//   tokenizer.ggml.tokens      array[string], n ≥ 1 tokens in id order
//   tokenizer.ggml.token_type  array[i32], optional; exactly n values, each
//                              1..6 (TokenType); absent: all normal
//   tokenizer.ggml.merges      array[string], rank order; each "a b" split at
//                              the first space after the first byte (as
//                              llama.cpp does, so a may be " "... never
//                              empty); a and b must both be tokens
//   tokenizer.ggml.bos_token_id / eos_token_id   any integer type, optional,
//                              in [0, n)
//   tokenizer.ggml.add_bos_token / add_eos_token bool, optional (a bos or eos
//                              id must then exist)
//   tokenizer.ggml.add_space_prefix             bool, optional (ByteLevel
//                              add_prefix_space)
// Every error is a bitrank::Error "gguf '<file>': key <key>...: <what>".
#include <fstream>
#include <limits>
#include <string>
#include <unordered_map>

#include "bitrank/error.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/model_file.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/io/tokenizer.hpp"

namespace bitrank::io {
namespace {

constexpr std::string_view kModel = "tokenizer.ggml.model";
constexpr std::string_view kPre = "tokenizer.ggml.pre";
constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kTypes = "tokenizer.ggml.token_type";
constexpr std::string_view kMerges = "tokenizer.ggml.merges";
constexpr std::string_view kBos = "tokenizer.ggml.bos_token_id";
constexpr std::string_view kEos = "tokenizer.ggml.eos_token_id";
constexpr std::string_view kAddBos = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kAddEos = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kAddSpacePrefix = "tokenizer.ggml.add_space_prefix";

struct Reader {
  const GgufFile& file;

  [[noreturn]] void bad(std::string_view key, std::string_view what) const {
    fail("gguf '{}': key {}: {}", file.name(), key, what);
  }

  // An optional token id: -1 when absent.
  std::int32_t token_id(std::string_view key, std::size_t n_tokens) const {
    if (!file.has(key)) return -1;
    const std::int64_t id = file.get_int(key);  // throws naming the key for a non-integer
    if (id < 0 || static_cast<std::uint64_t>(id) >= n_tokens)
      bad(key, format("token id {} out of range [0, {})", id, n_tokens));
    return static_cast<std::int32_t>(id);
  }

  bool flag(std::string_view key, bool fallback) const { return file.has(key) ? file.get_bool(key) : fallback; }
};

}  // namespace

TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& file) {
  const Reader r{file};
  TokenizerSpec spec;

  const std::string& model = file.get_string(kModel);
  if (model != "gpt2")
    r.bad(kModel, format("tokenizer model \"{}\" is not supported (only \"gpt2\", byte-level BPE)", model));

  if (!file.has(kPre)) r.bad(kPre, "missing (byte-level BPE needs the pre-tokenizer name)");
  const std::string& pre = file.get_string(kPre);
  bool default_add_bos = false;
  if (pre == "gpt-2") {
    spec.pre = PreTokenizer::gpt2;
  } else if (pre == "smollm") {
    spec.pre = PreTokenizer::smollm;
  } else if (pre == "qwen2") {
    spec.pre = PreTokenizer::qwen2;
    spec.normalizer = Normalizer::nfc;
  } else if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") {
    spec.pre = PreTokenizer::llama3;
    spec.ignore_merges = true;
    default_add_bos = true;
  } else {
    r.bad(kPre, format("pre-tokenizer \"{}\" is not supported (gpt-2, smollm, qwen2, llama3, llama-v3, llama-bpe)",
                       pre));
  }

  spec.tokens = file.get_string_array(kTokens);
  const std::size_t n = spec.tokens.size();
  if (n == 0) r.bad(kTokens, "empty vocabulary");
  if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    r.bad(kTokens, format("{} tokens is too many", n));
  std::unordered_map<std::string_view, std::size_t> ids;
  ids.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (spec.tokens[i].empty()) r.bad(format("{}[{}]", kTokens, i), "empty token");
    const auto [it, fresh] = ids.emplace(spec.tokens[i], i);
    if (!fresh) r.bad(format("{}[{}]", kTokens, i), format("token \"{}\" repeats token {}", spec.tokens[i], it->second));
  }

  if (file.has(kTypes)) {
    const std::vector<std::int32_t>& types = file.get_i32_array(kTypes);
    if (types.size() != n) r.bad(kTypes, format("{} token types for {} tokens", types.size(), n));
    spec.types.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (types[i] < 1 || types[i] > 6) r.bad(format("{}[{}]", kTypes, i), format("type {} (expected 1..6)", types[i]));
      spec.types[i] = static_cast<TokenType>(types[i]);
    }
  } else {
    spec.types.assign(n, TokenType::normal);
  }

  const std::vector<std::string>& merges = file.get_string_array(kMerges);
  spec.merges.reserve(merges.size());
  for (std::size_t k = 0; k < merges.size(); ++k) {
    const std::string& m = merges[k];
    const std::size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 == m.size())
      r.bad(format("{}[{}]", kMerges, k), format("\"{}\" is not two tokens separated by a space", m));
    std::string a = m.substr(0, space), b = m.substr(space + 1);
    if (!ids.contains(a) || !ids.contains(b))
      r.bad(format("{}[{}]", kMerges, k), format("\"{}\" names \"{}\" which is not a token",
                                                  m, ids.contains(a) ? b : a));
    spec.merges.emplace_back(std::move(a), std::move(b));
  }

  spec.bos_id = r.token_id(kBos, n);
  spec.eos_id = r.token_id(kEos, n);
  spec.add_bos = r.flag(kAddBos, default_add_bos);
  spec.add_eos = r.flag(kAddEos, false);
  if (spec.add_bos && spec.bos_id < 0) r.bad(kAddBos, format("set, but {} is missing", kBos));
  if (spec.add_eos && spec.eos_id < 0) r.bad(kAddEos, format("set, but {} is missing", kEos));
  spec.add_prefix_space = r.flag(kAddSpacePrefix, false);
  return spec;
}

// A model's tokenizer (tokenizer.hpp): a Hugging Face directory's
// tokenizer.json or a GGUF header's keys, the model loaders' two layouts.
Tokenizer load_model_tokenizer(const std::filesystem::path& model) {
  std::error_code ec;
  // A directory needs only its tokenizer.json here (no config.json).
  if (std::filesystem::is_directory(model, ec)) return Tokenizer(load_tokenizer_json(model / "tokenizer.json"));
  const ModelFileKind kind = identify_model_file(model);
  if (kind == ModelFileKind::hf_directory) return Tokenizer(load_tokenizer_json(model.parent_path() / "tokenizer.json"));
  if (kind == ModelFileKind::safetensors) {
    // A bitrank model file (safetensors): the tokenizer sits in its metadata.
    const Safetensors st = Safetensors::open(model);
    const auto it = st.metadata().find("bitrank.tokenizer");
    if (it == st.metadata().end()) fail("{}: a safetensors file without a tokenizer (no metadata 'bitrank.tokenizer'): not a bitrank model, "
           "or one saved without its tokenizer", model.string());
    return Tokenizer(parse_tokenizer_spec_json(it->second, model.string() + ": bitrank.tokenizer"));
  }
  const GgufFile file = GgufFile::open(model, {.verify_data = false});
  return Tokenizer(tokenizer_spec_from_gguf(file));
}

bool is_gguf_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

}  // namespace bitrank::io
