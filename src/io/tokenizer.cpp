// Byte-level BPE: the tokenizer.json loader, the merge loop and the
// added-token matcher (design note in bitrank/io/tokenizer.hpp).
//
// tokenizer.json keys read (everything else is ignored or refused):
//   model: {type: "BPE", vocab: {token: id}, merges: ["a b"] | [["a","b"]],
//           dropout: null, continuing_subword_prefix / end_of_word_suffix:
//           null or "", byte_fallback: false, ignore_merges}
//   normalizer: null | {type: "NFC"}
//   pre_tokenizer: ByteLevel(use_regex) | Sequence[Digits(individual), ByteLevel(use_regex)]
//                  | Sequence[Split(Regex QWEN2 or LLAMA3, Isolated), ByteLevel(no regex)]
//   added_tokens: [{id, content, special, single_word, lstrip, rstrip}]
//   post_processor: null | ByteLevel | TemplateProcessing | Sequence of those
//   decoder: null | ByteLevel
#include "bitrank/io/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "bitrank/error.hpp"
#include "io/pretokenize.hpp"

namespace bitrank::io {
namespace {

using json = nlohmann::json;

constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for
// themselves; the other 68 take U+0100.. in byte order.
std::array<std::uint32_t, 256> make_byte_stand_ins() {
  std::array<std::uint32_t, 256> map{};
  std::uint32_t next = 256;
  for (std::uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    map[b] = printable ? b : next++;
  }
  return map;
}
const std::array<std::uint32_t, 256> kByteStandIn = make_byte_stand_ins();

// Byte of a stand-in code point, or -1.
int stand_in_byte(std::uint32_t cp) {
  if (cp < 256) return kByteStandIn[cp] == cp ? static_cast<int>(cp) : -1;
  if (cp >= 256 + 68) return -1;
  for (int b = 0; b < 256; ++b)
    if (kByteStandIn[static_cast<std::size_t>(b)] == cp) return b;
  return -1;
}

// A token's bytes as decode gives them: the byte-level string mapped back,
// or the text as is if some character is no stand-in.
std::string token_bytes(const std::string& token) {
  std::string out;
  std::size_t i = 0;
  while (i < token.size()) {
    std::size_t len = 1;
    const std::uint32_t cp = detail::decode_utf8(token, i, len);
    const int b = cp == 0xFFFFFFFFu ? -1 : stand_in_byte(cp);
    if (b < 0) return token;
    out += static_cast<char>(b);
    i += len;
  }
  return out;
}

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// Open-addressing map from a token pair to its merge (rank, merged id).
class MergeTable {
 public:
  struct Merge {
    std::int32_t rank, id;
  };
  void build(const std::vector<std::tuple<std::int32_t, std::int32_t, Merge>>& merges) {
    std::size_t cap = 16;
    while (cap < merges.size() * 2 + 16) cap *= 2;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, Merge{-1, -1});
    mask_ = cap - 1;
    for (const auto& [a, b, m] : merges) {
      const std::uint64_t key = pack(a, b);
      std::size_t slot = hash(key) & mask_;
      while (keys_[slot] != kEmpty && keys_[slot] != key) slot = (slot + 1) & mask_;
      keys_[slot] = key;
      values_[slot] = m;  // a later duplicate replaces an earlier one, as `tokenizers` does
    }
  }
  const Merge* find(std::int32_t a, std::int32_t b) const {
    const std::uint64_t key = pack(a, b);
    std::size_t slot = hash(key) & mask_;
    while (true) {
      if (keys_[slot] == key) return &values_[slot];
      if (keys_[slot] == kEmpty) return nullptr;
      slot = (slot + 1) & mask_;
    }
  }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  static std::uint64_t pack(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  static std::size_t hash(std::uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  std::vector<std::uint64_t> keys_;
  std::vector<Merge> values_;
  std::size_t mask_ = 0;
};

}  // namespace

std::string byte_to_unicode(std::uint8_t byte) {
  std::string s;
  detail::append_utf8(s, kByteStandIn[byte]);
  return s;
}

std::string_view pre_tokenizer_name(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::gpt2: return "gpt2";
    case PreTokenizer::smollm: return "smollm";
    case PreTokenizer::qwen2: return "qwen2";
    case PreTokenizer::llama3: return "llama3";
  }
  return "?";
}

// --- the tokenizer ----------------------------------------------------------

struct Tokenizer::Impl {
  TokenizerSpec spec;
  StringMap<std::int32_t> ids;  // spec string → id (first id of a string)
  std::array<std::int32_t, 256> byte_token{};
  MergeTable merges;
  std::vector<std::string> decoded;  // per id: bytes that decode writes
  struct Added {
    std::string text;
    std::int32_t id;
  };
  // Added tokens by first byte, longest first: control tokens are matched in
  // the raw text, user-defined ones in the normalised text (as `tokenizers`
  // does with its default normalized=false for special tokens and true for
  // the others).
  struct AddedTable {
    std::array<std::vector<Added>, 256> by_byte;
    bool empty = true;
    void add(const std::string& text, std::int32_t id) {
      by_byte[static_cast<unsigned char>(text[0])].push_back({text, id});
      empty = false;
    }
    void sort() {
      for (auto& v : by_byte)
        std::stable_sort(v.begin(), v.end(), [](const Added& a, const Added& b) { return a.text.size() > b.text.size(); });
    }
    // Calls span(text between matches) and token(id) in order.
    template <class Span, class Token>
    void split(std::string_view text, Span&& span, Token&& token) const {
      std::size_t start = 0, i = 0;
      while (!empty && i < text.size()) {
        const Added* hit = nullptr;
        for (const auto& a : by_byte[static_cast<unsigned char>(text[i])])
          if (text.compare(i, a.text.size(), a.text) == 0) {
            hit = &a;
            break;
          }
        if (!hit) {
          ++i;
          continue;
        }
        span(text.substr(start, i - start));
        token(hit->id);
        i += hit->text.size();
        start = i;
      }
      span(text.substr(start));
    }
  };
  AddedTable control_tokens, user_tokens;

  mutable std::mutex mutex;
  mutable StringMap<std::vector<std::int32_t>> cache;
  mutable detail::Pieces pieces, sub_pieces;
  struct Symbol {
    std::int32_t id, prev, next;
  };
  struct Candidate {
    std::int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  mutable std::vector<Symbol> symbols;
  mutable std::vector<Candidate> heap;
  mutable std::string scratch;

  static constexpr std::size_t kCacheMaxEntries = 1 << 18;
  static constexpr std::size_t kCacheMaxBytes = 256;

  explicit Impl(TokenizerSpec s);
  void bpe(std::string_view word, std::vector<std::int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const;
  void byte_level(std::string_view piece, bool use_regex, std::vector<std::int32_t>& out) const;
  void encode_span(std::string_view span, std::vector<std::int32_t>& out) const;
};

Tokenizer::Impl::Impl(TokenizerSpec s) : spec(std::move(s)) {
  const std::size_t n = spec.tokens.size();
  if (n == 0) fail("tokenizer: empty vocabulary");
  if (n > 0x7FFFFFFF) fail("tokenizer: {} tokens is too many", n);
  if (spec.types.size() != n) fail("tokenizer: {} token types for {} tokens", spec.types.size(), n);
  ids.reserve(n);
  decoded.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    ids.emplace(spec.tokens[i], static_cast<std::int32_t>(i));
    decoded[i] = token_bytes(spec.tokens[i]);
    const auto t = static_cast<int>(spec.types[i]);
    if (t < 1 || t > 6) fail("tokenizer: token {} has type {} (expected 1..6)", i, t);
  }
  // A byte without a token (SmolLM2's vocabulary lacks 21, e.g. 0x04, 0xFF)
  // is dropped from the text before merging, as `tokenizers` drops a
  // character its BPE model (without unk token) cannot spell.
  for (int b = 0; b < 256; ++b) {
    const auto it = ids.find(byte_to_unicode(static_cast<std::uint8_t>(b)));
    byte_token[static_cast<std::size_t>(b)] = it == ids.end() ? -1 : it->second;
  }
  std::vector<std::tuple<std::int32_t, std::int32_t, MergeTable::Merge>> table;
  table.reserve(spec.merges.size());
  for (std::size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [a, b] = spec.merges[r];
    const auto ia = ids.find(a), ib = ids.find(b), iab = ids.find(a + b);
    if (ia == ids.end() || ib == ids.end() || iab == ids.end())
      fail("tokenizer: merge {} (\"{}\" \"{}\") names a token not in the vocabulary", r, a, b);
    table.emplace_back(ia->second, ib->second, MergeTable::Merge{static_cast<std::int32_t>(r), iab->second});
  }
  merges.build(table);
  for (std::int32_t id : {spec.bos_id, spec.eos_id})
    if (id < -1 || id >= static_cast<std::int32_t>(n)) fail("tokenizer: bos/eos id {} out of range [0, {})", id, n);
  if (spec.add_bos && spec.bos_id < 0) fail("tokenizer: add_bos without a bos id");
  if (spec.add_eos && spec.eos_id < 0) fail("tokenizer: add_eos without an eos id");
  for (std::size_t i = 0; i < n; ++i) {
    if (spec.tokens[i].empty()) continue;
    if (spec.types[i] == TokenType::control) control_tokens.add(spec.tokens[i], static_cast<std::int32_t>(i));
    if (spec.types[i] == TokenType::user_defined) user_tokens.add(spec.tokens[i], static_cast<std::int32_t>(i));
  }
  control_tokens.sort();
  user_tokens.sort();
}

// Merges by rank over the byte tokens of word (as `tokenizers`' Word::merge_all:
// a min-heap of (rank, position), stale entries skipped).
void Tokenizer::Impl::bpe(std::string_view word, std::vector<std::int32_t>& out) const {
  symbols.resize(word.size());
  heap.clear();
  std::int32_t n = 0;  // symbols: the bytes that have a token
  for (const char c : word) {
    const std::int32_t id = byte_token[static_cast<unsigned char>(c)];
    if (id < 0) continue;
    symbols[static_cast<std::size_t>(n)] = {id, n - 1, -1};
    if (n > 0) symbols[static_cast<std::size_t>(n - 1)].next = n;
    ++n;
  }
  auto push_pair = [&](std::int32_t pos) {
    const Symbol& s = symbols[static_cast<std::size_t>(pos)];
    if (s.next < 0) return;
    if (const auto* m = merges.find(s.id, symbols[static_cast<std::size_t>(s.next)].id)) {
      heap.push_back({m->rank, pos, m->id});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& s = symbols[static_cast<std::size_t>(top.pos)];
    if (s.id < 0 || s.next < 0) continue;
    const Symbol& nx = symbols[static_cast<std::size_t>(s.next)];
    const auto* m = merges.find(s.id, nx.id);
    if (!m || m->id != top.id) continue;
    const std::int32_t gone = s.next;
    s.id = top.id;
    s.next = nx.next;
    if (s.next >= 0) symbols[static_cast<std::size_t>(s.next)].prev = top.pos;
    symbols[static_cast<std::size_t>(gone)].id = -1;
    if (s.prev >= 0) push_pair(s.prev);
    push_pair(top.pos);
  }
  for (std::int32_t i = n > 0 ? 0 : -1; i >= 0 && i < n; i = symbols[static_cast<std::size_t>(i)].next)
    out.push_back(symbols[static_cast<std::size_t>(i)].id);
}

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    if (const std::int32_t id = byte_token[static_cast<unsigned char>(word[0])]; id >= 0) out.push_back(id);
    return;
  }
  const bool cacheable = word.size() <= kCacheMaxBytes;
  if (cacheable) {
    if (const auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t start = out.size();
  bool whole = false;
  if (spec.ignore_merges) {
    std::string level;
    for (char c : word) detail::append_utf8(level, kByteStandIn[static_cast<unsigned char>(c)]);
    if (const auto it = ids.find(level); it != ids.end()) {
      out.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) bpe(word, out);
  if (cacheable) {
    if (cache.size() >= kCacheMaxEntries) cache.clear();
    cache.emplace(std::string(word), std::vector<std::int32_t>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
  }
}

// ByteLevel pre-tokenizer step on one piece: optional prefix space, optional
// GPT-2 regex split, then BPE of each word.
void Tokenizer::Impl::byte_level(std::string_view piece, bool use_regex, std::vector<std::int32_t>& out) const {
  std::string prefixed;
  if (spec.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
    if (piece.empty()) return;
    prefixed.reserve(piece.size() + 1);
    prefixed += ' ';
    prefixed += piece;
    piece = prefixed;
  }
  if (!use_regex) {
    encode_word(piece, out);
    return;
  }
  sub_pieces.clear();
  detail::split_gpt2(piece, 0, sub_pieces);
  for (const auto& [b, e] : sub_pieces) encode_word(piece.substr(b, e - b), out);
}

void Tokenizer::Impl::encode_span(std::string_view span, std::vector<std::int32_t>& out) const {
  if (span.empty()) return;
  pieces.clear();
  switch (spec.pre) {
    case PreTokenizer::gpt2:
      byte_level(span, true, out);
      return;
    case PreTokenizer::smollm: {
      detail::split_digits(span, 0, pieces);  // byte_level splits into sub_pieces
      for (const auto& [b, e] : pieces) byte_level(span.substr(b, e - b), true, out);
      return;
    }
    case PreTokenizer::qwen2:
    case PreTokenizer::llama3:
      detail::split_qwen2(span, 0, spec.pre == PreTokenizer::qwen2 ? 1 : 3, pieces);
      for (const auto& [b, e] : pieces) byte_level(span.substr(b, e - b), false, out);
      return;
  }
}

Tokenizer::Tokenizer(TokenizerSpec spec) : impl_(std::make_unique<Impl>(std::move(spec))) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

const TokenizerSpec& Tokenizer::spec() const { return impl_->spec; }
std::int32_t Tokenizer::n_tokens() const { return static_cast<std::int32_t>(impl_->spec.tokens.size()); }
std::optional<std::int32_t> Tokenizer::token_id(std::string_view token) const {
  const auto it = impl_->ids.find(token);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (options.add_special && m.spec.add_bos) out.push_back(m.spec.bos_id);
  auto push_token = [&](std::int32_t id) { out.push_back(id); };
  auto user_split = [&](std::string_view raw) {
    std::string normalized;
    if (m.spec.normalizer == Normalizer::nfc && !detail::nfc_unchanged(raw)) {
      normalized = detail::nfc(raw);
      raw = normalized;
    }
    m.user_tokens.split(raw, [&](std::string_view span) { m.encode_span(span, out); }, push_token);
  };
  if (options.parse_special)
    m.control_tokens.split(text, user_split, push_token);
  else
    user_split(text);
  if (options.add_special && m.spec.add_eos) out.push_back(m.spec.eos_id);
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_control) const {
  const Impl& m = *impl_;
  std::string out;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    const std::int32_t id = ids[k];
    if (id < 0 || id >= n_tokens()) fail("tokenizer decode: id {} at position {} out of range [0, {})", id, k, n_tokens());
    if (skip_control && m.spec.types[static_cast<std::size_t>(id)] == TokenType::control) continue;
    out += m.decoded[static_cast<std::size_t>(id)];
  }
  return out;
}

// --- tokenizer.json ---------------------------------------------------------

namespace {

struct JsonReader {
  std::string_view source;

  [[noreturn]] void bad(std::string_view key, std::string_view what) const {
    fail("{}: tokenizer.json key {}: {}", source, key, what);
  }
  const json& member(const json& obj, const char* key, std::string_view path) const {
    if (!obj.is_object()) bad(path, "expected an object");
    const auto it = obj.find(key);
    if (it == obj.end()) bad(std::string(path) + "." + key, "missing");
    return *it;
  }
  std::string string_of(const json& v, std::string_view path) const {
    if (!v.is_string()) bad(path, "expected a string");
    return v.get<std::string>();
  }
  bool flag(const json& obj, const char* key, bool fallback, std::string_view path) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) bad(std::string(path) + "." + key, "expected true or false");
    return it->get<bool>();
  }
  std::string type_of(const json& obj, std::string_view path) const {
    return string_of(member(obj, "type", path), std::string(path) + ".type");
  }
};

// ByteLevel pre-tokenizer node: returns use_regex.
bool read_byte_level(const JsonReader& r, const json& node, std::string_view path, TokenizerSpec& spec) {
  spec.add_prefix_space = r.flag(node, "add_prefix_space", true, path);
  return r.flag(node, "use_regex", true, path);
}

void read_pre_tokenizer(const JsonReader& r, const json& pre, TokenizerSpec& spec) {
  const std::string unsupported = "unsupported pre-tokenizer " + pre.dump();
  if (pre.is_null()) r.bad("pre_tokenizer", "null (a byte-level BPE needs ByteLevel)");
  const std::string type = r.type_of(pre, "pre_tokenizer");
  if (type == "ByteLevel") {
    if (!read_byte_level(r, pre, "pre_tokenizer", spec)) r.bad("pre_tokenizer", unsupported);
    spec.pre = PreTokenizer::gpt2;
    return;
  }
  if (type != "Sequence") r.bad("pre_tokenizer", unsupported);
  const json& seq = r.member(pre, "pretokenizers", "pre_tokenizer");
  if (!seq.is_array() || seq.size() != 2) r.bad("pre_tokenizer.pretokenizers", unsupported);
  const std::string first = r.type_of(seq[0], "pre_tokenizer.pretokenizers[0]");
  if (r.type_of(seq[1], "pre_tokenizer.pretokenizers[1]") != "ByteLevel")
    r.bad("pre_tokenizer.pretokenizers[1]", unsupported);
  const bool use_regex = read_byte_level(r, seq[1], "pre_tokenizer.pretokenizers[1]", spec);
  if (first == "Digits") {
    if (!r.flag(seq[0], "individual_digits", false, "pre_tokenizer.pretokenizers[0]") || !use_regex)
      r.bad("pre_tokenizer", unsupported);
    spec.pre = PreTokenizer::smollm;
    return;
  }
  if (first == "Split") {
    const json& split = seq[0];
    const std::string path = "pre_tokenizer.pretokenizers[0]";
    const json& pattern = r.member(split, "pattern", path);
    if (!pattern.is_object() || !pattern.contains("Regex")) r.bad(path + ".pattern", unsupported);
    const std::string regex = r.string_of(pattern["Regex"], path + ".pattern.Regex");
    if (r.string_of(r.member(split, "behavior", path), path + ".behavior") != "Isolated" ||
        r.flag(split, "invert", false, path) || use_regex)
      r.bad("pre_tokenizer", unsupported);
    if (regex == kQwen2Pattern) {
      spec.pre = PreTokenizer::qwen2;
    } else if (regex == kLlama3Pattern) {
      spec.pre = PreTokenizer::llama3;
    } else {
      r.bad(path + ".pattern.Regex", "unsupported pattern " + regex);
    }
    return;
  }
  r.bad("pre_tokenizer", unsupported);
}

// TemplateProcessing "single": [SpecialToken?, Sequence A, SpecialToken?].
void read_template(const JsonReader& r, const json& node, const TokenizerSpec& spec,
                   const StringMap<std::int32_t>& ids, TokenizerSpec& out) {
  const json& single = r.member(node, "single", "post_processor");
  if (!single.is_array()) r.bad("post_processor.single", "expected an array");
  bool seen_sequence = false;
  for (const json& piece : single) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken")) r.bad("post_processor.single", "unsupported piece " + piece.dump());
    const std::string name = r.string_of(r.member(piece["SpecialToken"], "id", "post_processor.single"), "post_processor.single.id");
    const auto it = ids.find(name);
    if (it == ids.end()) r.bad("post_processor.single", "unknown token " + name);
    (void)spec;
    if (!seen_sequence) {
      if (out.add_bos) r.bad("post_processor.single", "more than one leading special token");
      out.add_bos = true;
      out.bos_id = it->second;
    } else {
      if (out.add_eos) r.bad("post_processor.single", "more than one trailing special token");
      out.add_eos = true;
      out.eos_id = it->second;
    }
  }
}

void read_post_processor(const JsonReader& r, const json& node, const StringMap<std::int32_t>& ids, TokenizerSpec& spec) {
  if (node.is_null()) return;
  const std::string type = r.type_of(node, "post_processor");
  if (type == "ByteLevel") return;
  if (type == "TemplateProcessing") return read_template(r, node, spec, ids, spec);
  if (type == "Sequence") {
    const json& list = r.member(node, "processors", "post_processor");
    if (!list.is_array()) r.bad("post_processor.processors", "expected an array");
    for (const json& p : list) read_post_processor(r, p, ids, spec);
    return;
  }
  r.bad("post_processor", "unsupported type " + type);
}

}  // namespace

TokenizerSpec parse_tokenizer_json(std::string_view json_text, std::string_view source) {
  const JsonReader r{source};
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  TokenizerSpec spec;
  const json& model = r.member(root, "model", "(root)");
  if (r.type_of(model, "model") != "BPE") r.bad("model.type", "only BPE is supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      r.bad(std::string("model.") + key, "unsupported (byte-level BPE has none)");
  }
  if (const auto it = model.find("dropout"); it != model.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0))
    r.bad("model.dropout", "unsupported");
  if (r.flag(model, "byte_fallback", false, "model")) r.bad("model.byte_fallback", "unsupported");
  spec.ignore_merges = r.flag(model, "ignore_merges", false, "model");

  // Vocabulary: dense ids 0..n-1 once added tokens are counted.
  const json& vocab = r.member(model, "vocab", "model");
  if (!vocab.is_object()) r.bad("model.vocab", "expected an object");
  const json& added = root.contains("added_tokens") ? root["added_tokens"] : json::array();
  if (!added.is_array()) r.bad("added_tokens", "expected an array");
  std::vector<std::optional<std::string>> tokens;
  std::vector<TokenType> types;
  auto place = [&](std::int64_t id, std::string text, TokenType type, std::string_view key, bool replace) {
    if (id < 0 || id > 0x7FFFFFFE) r.bad(key, "id " + std::to_string(id) + " out of range");
    const auto u = static_cast<std::size_t>(id);
    if (u > vocab.size() + added.size()) r.bad(key, "id " + std::to_string(id) + " leaves a gap in the ids");
    if (u >= tokens.size()) tokens.resize(u + 1), types.resize(u + 1, TokenType::normal);
    if (tokens[u] && !replace) r.bad(key, "id " + std::to_string(id) + " used twice");
    tokens[u] = std::move(text);
    types[u] = type;
  };
  for (const auto& [text, id] : vocab.items()) {
    if (!id.is_number_integer()) r.bad("model.vocab." + text, "id is not an integer");
    place(id.get<std::int64_t>(), text, TokenType::normal, "model.vocab." + text, false);
  }
  for (std::size_t k = 0; k < added.size(); ++k) {
    const json& a = added[k];
    const std::string path = "added_tokens[" + std::to_string(k) + "]";
    const json& id = r.member(a, "id", path);
    if (!id.is_number_integer()) r.bad(path + ".id", "expected an integer");
    const std::string content = r.string_of(r.member(a, "content", path), path + ".content");
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (r.flag(a, key, false, path)) r.bad(path + "." + key, "true is not supported");
    const bool special = r.flag(a, "special", false, path);
    place(id.get<std::int64_t>(), content, special ? TokenType::control : TokenType::user_defined, path, true);
  }
  spec.tokens.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (!tokens[i]) r.bad("model.vocab", "no token has id " + std::to_string(i));
    spec.tokens.push_back(std::move(*tokens[i]));
  }
  spec.types = std::move(types);

  const json& merges = r.member(model, "merges", "model");
  if (!merges.is_array()) r.bad("model.merges", "expected an array");
  spec.merges.reserve(merges.size());
  for (std::size_t k = 0; k < merges.size(); ++k) {
    const json& m = merges[k];
    const std::string path = "model.merges[" + std::to_string(k) + "]";
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const auto space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r.bad(path, "expected \"a b\", got \"" + s + "\"");
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      r.bad(path, "expected \"a b\" or [\"a\", \"b\"]");
    }
  }

  const json& normalizer = root.contains("normalizer") ? root["normalizer"] : json();
  if (!normalizer.is_null()) {
    const std::string type = r.type_of(normalizer, "normalizer");
    if (type != "NFC") r.bad("normalizer", "unsupported type " + type);
    spec.normalizer = Normalizer::nfc;
  }
  read_pre_tokenizer(r, r.member(root, "pre_tokenizer", "(root)"), spec);
  if (root.contains("decoder") && !root["decoder"].is_null() && r.type_of(root["decoder"], "decoder") != "ByteLevel")
    r.bad("decoder", "only ByteLevel is supported");
  StringMap<std::int32_t> ids;
  for (std::size_t i = 0; i < spec.tokens.size(); ++i) ids.emplace(spec.tokens[i], static_cast<std::int32_t>(i));
  if (root.contains("post_processor")) read_post_processor(r, root["post_processor"], ids, spec);
  return spec;
}

TokenizerSpec load_tokenizer_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("{}: read error", path.string());
  return parse_tokenizer_json(text.str(), path.string());
}

// --- tokenizer.json and tokenizer_config.json, written ------------------------
// The inverse of parse_tokenizer_json above, with every field `tokenizers`
// requires present. Keys come out sorted (nlohmann::json is a std::map);
// neither reader cares.

namespace {

bool is_added(TokenType t) { return t == TokenType::control || t == TokenType::user_defined; }

json byte_level_json(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets},
          {"use_regex", use_regex}};
}

json pre_tokenizer_json(const TokenizerSpec& s) {
  switch (s.pre) {
    case PreTokenizer::gpt2: return byte_level_json(s.add_prefix_space, true, true);
    case PreTokenizer::smollm:
      return {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Digits"}, {"individual_digits", true}}, byte_level_json(s.add_prefix_space, true, true)}}};
    case PreTokenizer::qwen2:
    case PreTokenizer::llama3: {
      const std::string_view regex = s.pre == PreTokenizer::qwen2 ? kQwen2Pattern : kLlama3Pattern;
      const json split = {{"type", "Split"},
                          {"pattern", {{"Regex", std::string(regex)}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
      return {{"type", "Sequence"}, {"pretokenizers", {split, byte_level_json(s.add_prefix_space, false, false)}}};
    }
  }
  fail("tokenizer: unknown pre-tokenizer kind {}", static_cast<int>(s.pre));
}

// TemplateProcessing: [bos] $A [eos] for one sequence, the same around $B for pairs.
json post_processor_json(const TokenizerSpec& s) {
  if (!s.add_bos && !s.add_eos) return nullptr;
  json special = json::object();
  auto piece = [&](std::int32_t id) {
    const std::string& text = s.tokens[static_cast<std::size_t>(id)];
    special[text] = {{"id", text}, {"ids", json::array({id})}, {"tokens", json::array({text})}};
    return json{{"SpecialToken", {{"id", text}, {"type_id", 0}}}};
  };
  auto around = [&](const char* seq, int type_id) {
    json out = json::array();
    if (s.add_bos) out.push_back(piece(s.bos_id));
    out.push_back({{"Sequence", {{"id", seq}, {"type_id", type_id}}}});
    if (s.add_eos) out.push_back(piece(s.eos_id));
    return out;
  };
  json single = around("A", 0), pair = around("A", 0);
  for (json& p : around("B", 1)) pair.push_back(std::move(p));
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", special}};
}

std::string dump_tokenizer_json(const json& j, std::string_view what) {
  try {
    return j.dump(2);
  } catch (const json::exception& e) {
    fail("tokenizer: a token or merge is not valid UTF-8 and cannot be written to {}: {}", what, e.what());
  }
}

}  // namespace

std::string tokenizer_spec_to_hf_json(const TokenizerSpec& s) {
  (void)Tokenizer(s);  // a consistent spec: types, merges and ids checked
  json vocab = json::object(), added = json::array();
  StringMap<std::size_t> first;
  for (std::size_t i = 0; i < s.tokens.size(); ++i) {
    const std::string& t = s.tokens[i];
    if (const auto [it, fresh] = first.emplace(t, i); !fresh)
      fail("tokenizer: token {} (\"{}\") repeats token {}; tokenizer.json cannot hold two tokens of one string", i, t,
           it->second);
    if (!is_added(s.types[i])) {
      vocab[t] = i;
      continue;
    }
    const bool special = s.types[i] == TokenType::control;
    added.push_back({{"id", i},
                     {"content", t},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", !special},
                     {"special", special}});
  }
  json merges = json::array();
  for (const auto& [a, b] : s.merges) merges.push_back({a, b});
  const json model = {{"type", "BPE"},          {"dropout", nullptr},      {"unk_token", nullptr},
                      {"continuing_subword_prefix", nullptr},             {"end_of_word_suffix", nullptr},
                      {"fuse_unk", false},      {"byte_fallback", false},  {"ignore_merges", s.ignore_merges},
                      {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  const json root = {{"version", "1.0"},
                     {"truncation", nullptr},
                     {"padding", nullptr},
                     {"added_tokens", std::move(added)},
                     {"normalizer", s.normalizer == Normalizer::nfc ? json{{"type", "NFC"}} : json(nullptr)},
                     {"pre_tokenizer", pre_tokenizer_json(s)},
                     {"post_processor", post_processor_json(s)},
                     {"decoder", byte_level_json(true, true, true)},
                     {"model", model}};
  return dump_tokenizer_json(root, "tokenizer.json");
}

std::string hf_tokenizer_config_json(const TokenizerSpec& s, std::int64_t model_max_length) {
  (void)Tokenizer(s);
  auto token = [&](std::int32_t id) { return id < 0 ? json(nullptr) : json(s.tokens[static_cast<std::size_t>(id)]); };
  json j = {{"tokenizer_class", "PreTrainedTokenizerFast"},
            {"bos_token", token(s.bos_id)},
            {"eos_token", token(s.eos_id)},
            {"add_bos_token", s.add_bos},
            {"add_eos_token", s.add_eos},
            {"clean_up_tokenization_spaces", false}};
  if (model_max_length > 0) j["model_max_length"] = model_max_length;
  return dump_tokenizer_json(j, "tokenizer_config.json");
}

}  // namespace bitrank::io
