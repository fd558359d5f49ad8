// Byte-level BPE tokenizer against the `tokenizers` library: ids of the
// committed test texts for tokenizers trained by
// tools/fixtures/make_tokenizer_fixtures.py (SmolLM2-style, Qwen2-style,
// plain GPT-2 pre-tokenizer), round trips, the evaluation corpus by per-file
// digest, loader errors.
#include <gtest/gtest.h>

#include "support/corpus_digest.hpp"
#include "support/temp_dir.hpp"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bitrank/error.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/rng.hpp"
#include "io/pretokenize.hpp"

namespace bitrank::io {
namespace {

const std::string kDir = std::string(BITRANK_TEST_DATA_DIR) + "/tokenizer/";

const nlohmann::json& reference() {
  static const nlohmann::json ref = nlohmann::json::parse(test::read_file(kDir + "reference.json"));
  return ref;
}

// The tokenizer a reference name stands for: "gpt2" is smollm.json with the
// plain ByteLevel(use_regex) pre-tokenizer, "gpt2_prefix" the same with
// add_prefix_space, "llama3" qwen2.json with the Llama 3 regex.
TokenizerSpec spec_for(const std::string& name) {
  if (name == "gpt2" || name == "gpt2_prefix") {
    TokenizerSpec spec = load_tokenizer_json(kDir + "smollm.json");
    spec.pre = PreTokenizer::gpt2;
    spec.add_prefix_space = name == "gpt2_prefix";
    return spec;
  }
  if (name == "llama3") {
    TokenizerSpec spec = load_tokenizer_json(kDir + "qwen2.json");
    spec.pre = PreTokenizer::llama3;
    return spec;
  }
  return load_tokenizer_json(kDir + name + ".json");
}

std::string show(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (auto id : ids) s += std::to_string(id) + " ";
  return s;
}

TEST(Tokenizer, ByteStandIns) {
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_to_unicode('a'), "a");
  EXPECT_EQ(byte_to_unicode(0xAD), "\xC5\x83");  // soft hyphen → U+0143
  EXPECT_EQ(byte_to_unicode(0xE9), "\xC3\xA9");  // é stands for itself
}

TEST(Tokenizer, LoadsSpecs) {
  const TokenizerSpec smollm = load_tokenizer_json(kDir + "smollm.json");
  EXPECT_EQ(smollm.pre, PreTokenizer::smollm);
  EXPECT_EQ(smollm.tokens.size(), 3001u);
  EXPECT_EQ(smollm.tokens[0], "<|endoftext|>");
  EXPECT_EQ(smollm.types[0], TokenType::control);
  EXPECT_EQ(smollm.tokens[3000], "<user tag>");
  EXPECT_EQ(smollm.types[3000], TokenType::user_defined);
  EXPECT_EQ(smollm.types[100], TokenType::normal);
  EXPECT_FALSE(smollm.add_prefix_space);
  const TokenizerSpec qwen = load_tokenizer_json(kDir + "qwen2.json");
  EXPECT_EQ(qwen.pre, PreTokenizer::qwen2);
  // qwen2.json stores merges as "a b" strings, smollm.json as pairs.
  EXPECT_EQ(qwen.merges[0], (std::pair<std::string, std::string>{"\xC4\xA0", "\xC4\xA0"}));
  EXPECT_EQ(smollm.merges[0], qwen.merges[0]);
}

TEST(Tokenizer, MergeFormsAgree) {
  auto j = nlohmann::json::parse(test::read_file(kDir + "smollm.json"));
  const TokenizerSpec pairs = parse_tokenizer_json(j.dump(), "pairs");
  for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const TokenizerSpec strings = parse_tokenizer_json(j.dump(), "strings");
  EXPECT_GT(pairs.merges.size(), 2000u);
  EXPECT_EQ(pairs.merges, strings.merges);
  EXPECT_EQ(pairs.tokens, strings.tokens);
}

std::string normalized(const Tokenizer& tok, const std::string& text) {
  return tok.spec().normalizer == Normalizer::nfc ? detail::nfc(text) : text;
}

class Reference : public ::testing::TestWithParam<std::string> {};

TEST_P(Reference, IdsEqualTokenizersLibrary) {
  const std::string name = GetParam();
  const Tokenizer tok(spec_for(name));
  const auto& texts = reference()["texts"];
  const auto& want = reference()["ids"][name];
  ASSERT_EQ(texts.size(), want.size());
  std::size_t tokens = 0, mismatches = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    const auto ids = tok.encode(text, {.parse_special = true});
    const auto expected = want[i].get<std::vector<std::int32_t>>();
    tokens += ids.size();
    if (ids != expected && ++mismatches <= 5)
      ADD_FAILURE() << name << " text " << i << " " << nlohmann::json(text).dump() << "\n got  " << show(ids)
                    << "\n want " << show(expected);
    if (name != "gpt2_prefix") {  // the prefix space is not undone by decode
      EXPECT_EQ(tok.decode(ids), normalized(tok, text)) << name << " text " << i;
    }
  }
  EXPECT_EQ(mismatches, 0u);
  std::size_t special_texts = 0;
  for (const auto& [index, expected] : reference()["ids_specials_as_text"][name].items()) {
    const std::string text = texts[std::stoul(index)].get<std::string>();
    const auto ids = tok.encode(text, {.parse_special = false});
    EXPECT_EQ(ids, expected.get<std::vector<std::int32_t>>()) << name << " text " << index << " specials as text";
    if (name != "gpt2_prefix") {
      EXPECT_EQ(tok.decode(ids), normalized(tok, text));
    }
    ++special_texts;
  }
  EXPECT_GE(special_texts, 5u);
  std::printf("[ tokenizer ] %s: %zu texts, %zu tokens equal to tokenizers; %zu texts with specials as text\n",
              name.c_str(), texts.size(), tokens, special_texts);
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, Reference, ::testing::Values("smollm", "qwen2", "gpt2", "gpt2_prefix", "llama3"));

TEST(Tokenizer, NfcKnownAnswers) {
  const std::pair<const char*, const char*> cases[] = {
      {"A\u030a", "\u00c5"},                     // composes
      {"\u212b", "\u00c5"},                      // singleton
      {"e\u0301\u0323", "\u1eb9\u0301"},         // reordered, then composed
      {"\u0958", "\u0915\u093c"},                // composition exclusion
      {"\u1100\u1161\u11a8", "\uac01"},          // Hangul L V T
      {"\uac00\u11a8", "\uac01"},                // Hangul LV + T
      {"\u0301a", "\u0301a"},                    // leading mark stays
      {"a\xff\u0301", "a\xff\u0301"},             // an invalid byte blocks composition
  };
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(detail::nfc(in), want) << in;
    EXPECT_FALSE(detail::nfc_unchanged(in) && std::string(in) != want) << in;
  }
  EXPECT_TRUE(detail::nfc_unchanged("plain ascii, caf\u00e9 \u4f60\u597d"));
}

TEST(Tokenizer, SpecialTokensOnlyWhenAsked) {
  const Tokenizer tok(spec_for("smollm"));
  const std::string text = "a<|endoftext|>b<user tag>";
  const auto with = tok.encode(text, {.parse_special = true});
  const auto without = tok.encode(text, {.parse_special = false});
  EXPECT_NE(std::find(with.begin(), with.end(), 0), with.end());
  EXPECT_EQ(std::find(without.begin(), without.end(), 0), without.end());
  // User-defined tokens are matched either way.
  EXPECT_EQ(with.back(), 3000);
  EXPECT_EQ(without.back(), 3000);
  EXPECT_EQ(tok.decode(with), text);
  EXPECT_EQ(tok.decode(without), text);
  EXPECT_EQ(tok.decode(with, /*skip_control=*/true), "ab<user tag>");
}

TEST(Tokenizer, InvalidUtf8KeepsBytes) {
  for (const std::string name : {"smollm", "qwen2", "gpt2"}) {
    const Tokenizer tok(spec_for(name));
    const std::vector<std::string> fixed = {"\xff", "a\xc3", "\xc3(", "\xe2\x82", "ok \xed\xa0\x80 surrogate",
                                            "\xc0\xaf overlong", "\xf4\x90\x80\x80 > U+10FFFF", "12\x80" "34 x\xfe\xfey"};
    for (const auto& t : fixed) EXPECT_EQ(tok.decode(tok.encode(t)), t) << name;
    // Random byte strings biased to UTF-8 lead and continuation bytes.
    XorShift rng(77);
    const char alphabet[] = {' ', 'a', 'Z', '1', '\'', 's', '\n', '\t', '\xc3', '\xa9', '\xe4', '\xb8', '\x80', '\xf0', '\x9f', '\xff'};
    for (int k = 0; k < 500; ++k) {
      std::string t;
      const int n = 1 + static_cast<int>(rng.next_u64() % 40);
      for (int c = 0; c < n; ++c) t += alphabet[rng.next_u64() % sizeof(alphabet)];
      const auto ids = tok.encode(t);
      ASSERT_EQ(tok.decode(ids), t) << name << " " << k;
    }
  }
}

// A byte with no token is dropped before merging, as `tokenizers` drops a
// character its BPE model (no unk token) cannot spell.
TEST(Tokenizer, ByteWithoutTokenIsDropped) {
  auto j = nlohmann::json::parse(test::read_file(kDir + "qwen2.json"));
  const auto z_id = j["model"]["vocab"]["z"];
  j["model"]["vocab"].erase("z");
  j["model"]["vocab"]["no byte z"] = z_id;
  auto& merges = j["model"]["merges"];
  for (std::size_t k = merges.size(); k-- > 0;) {  // merges naming "z" go too
    const std::string m = merges[k].get<std::string>();
    const auto space = m.find(' ');
    if (m.substr(0, space).find('z') != std::string::npos || m.substr(space + 1).find('z') != std::string::npos)
      merges.erase(k);
  }
  const Tokenizer dropped(parse_tokenizer_json(j.dump(), "no_z.json"));
  const Tokenizer full(spec_for("qwen2"));
  EXPECT_EQ(dropped.encode("z"), std::vector<std::int32_t>{});
  EXPECT_EQ(dropped.decode(dropped.encode("lazy fizz z buzz")), "lay fi  bu");
  EXPECT_EQ(dropped.encode("fizz"), dropped.encode("fi"));
  EXPECT_EQ(full.decode(full.encode("lazy fizz")), "lazy fizz");
}

TEST(Tokenizer, DecodeRejectsBadIds) {
  const Tokenizer tok(spec_for("qwen2"));
  const std::vector<std::int32_t> bad = {5, tok.n_tokens()};
  try {
    (void)tok.decode(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)tok.decode(std::vector<std::int32_t>{-1}), Error);
}

TEST(Tokenizer, BosEosFromTemplate) {
  auto j = nlohmann::json::parse(test::read_file(kDir + "qwen2.json"));
  j["post_processor"] = nlohmann::json::parse(
      R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|im_start|>","type_id":0}},
          {"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"<|endoftext|>","type_id":0}}],
          "pair":[],"special_tokens":{}})");
  const Tokenizer tok(parse_tokenizer_json(j.dump(), "template"));
  EXPECT_TRUE(tok.spec().add_bos && tok.spec().add_eos);
  const auto ids = tok.encode("hi", {.add_special = true});
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 0);
  EXPECT_EQ(tok.encode("hi").size(), ids.size() - 2);
}

TEST(Tokenizer, LoaderErrors) {
  const auto base = nlohmann::json::parse(test::read_file(kDir + "qwen2.json"));
  auto expect_error = [](const nlohmann::json& j, const std::string& needle) {
    try {
      (void)Tokenizer(parse_tokenizer_json(j.dump(), "bad.json"));
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  auto j = base;
  j["model"]["type"] = "WordPiece";
  expect_error(j, "bad.json: tokenizer.json key model.type");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+";
  expect_error(j, "unsupported pattern");
  j = base;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j, "pre_tokenizer");
  j = base;
  j["model"]["merges"][7] = "nospace";
  expect_error(j, "model.merges[7]");
  j = base;
  j["model"]["merges"][3] = "zzzq qqqz";
  expect_error(j, "merge 3");
  j = base;
  j["model"]["vocab"].erase("a");
  expect_error(j, "no token has id");
  j = base;
  j["added_tokens"][0]["lstrip"] = true;
  expect_error(j, "lstrip");
  EXPECT_THROW((void)parse_tokenizer_json("{not json", "bad.json"), Error);
  EXPECT_THROW((void)load_tokenizer_json(kDir + "does_not_exist.json"), Error);
}

// Without the corpus the digest tests skip, naming what is missing; with
// every file present there is nothing to skip for.
TEST(Tokenizer, CorpusDigestSkipsWithoutTheCorpus) {
  const test::TempDir tmp;
  const std::string present = (tmp.path() / "present.txt").string(), table = (tmp.path() / "digest.tsv").string();
  std::ofstream(present) << "text";
  std::ofstream(table) << "# path\tbytes\n" << present << "\t4\t1\t0\t1\t0\n";
  EXPECT_EQ(test::missing_corpus_files(table), "");
  std::ofstream(table, std::ios::app) << "/nonexistent/python3.11/a.rst.txt\t9\t1\t0\t1\t0\n"
                                      << "/nonexistent/fortunes/b\t9\t1\t0\t1\t0\n";
  const std::string why = test::missing_corpus_files(table);
  EXPECT_NE(why.find("2 of the 3 corpus files"), std::string::npos) << why;
  EXPECT_NE(why.find("(first: /nonexistent/python3.11/a.rst.txt)"), std::string::npos) << why;
  EXPECT_NE(why.find("python3.11-doc and fortunes"), std::string::npos) << why;
}

// The whole evaluation corpus (python3.11-doc reST sources, fortunes): per
// file, token count and FNV-1a 64 of the ids equal those `tokenizers` gave.
TEST(Tokenizer, CorpusDigestsEqualTokenizersLibrary) {
  if (const std::string missing = test::missing_corpus_files(kDir + "corpus_digest.tsv"); !missing.empty())
    GTEST_SKIP() << missing;
  const Tokenizer smollm(spec_for("smollm")), qwen(spec_for("qwen2"));
  std::size_t bytes = 0, tokens[2] = {0, 0};
  double seconds[2] = {0, 0};
  const std::size_t files = test::for_each_digest_row(kDir + "corpus_digest.tsv", [&](const test::DigestRow& row) {
    bytes += row.text.size();
    const Tokenizer* toks[2] = {&smollm, &qwen};
    for (int t = 0; t < 2; ++t) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = toks[t]->encode(row.text, {.parse_special = true});
      seconds[t] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      tokens[t] += ids.size();
      EXPECT_EQ(ids.size(), row.count[t]) << row.path << (t ? " qwen2" : " smollm");
      EXPECT_EQ(test::fnv1a64_hex(ids), row.hash[t]) << row.path << (t ? " qwen2" : " smollm");
    }
  });
  EXPECT_GT(files, 500u);
  std::printf("[ tokenizer ] corpus: %zu files, %.1f MB; smollm %zu tokens at %.1f MB/s, qwen2 %zu tokens at %.1f MB/s\n",
              files, bytes / 1e6, tokens[0], bytes / 1e6 / seconds[0], tokens[1], bytes / 1e6 / seconds[1]);
  // Single-threaded speed goal (caches warm up within the first files).
  EXPECT_GT(bytes / 1e6 / seconds[0], 1.0);
  EXPECT_GT(bytes / 1e6 / seconds[1], 1.0);
}

}  // namespace
}  // namespace bitrank::io
