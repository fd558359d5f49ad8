// TokenizerSpec <-> JSON text; the layout is in bitrank/io/tokenizer.hpp.
// The reader is strict (every key, no other key, exact types) because the
// text comes from a file that may lie; the Tokenizer constructor then checks
// the spec's consistency, so what reads back is what a Tokenizer accepts.
#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>

#include "bitrank/error.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "json_checked.hpp"

namespace bitrank::io {

namespace {

using nlohmann::json;

constexpr PreTokenizer kPreTokenizers[] = {PreTokenizer::gpt2, PreTokenizer::smollm, PreTokenizer::qwen2,
                                           PreTokenizer::llama3};

const char* normalizer_name(Normalizer n) { return n == Normalizer::nfc ? "nfc" : "none"; }

}  // namespace

std::string tokenizer_spec_to_json(const TokenizerSpec& s) {
  nlohmann::ordered_json j;
  j["tokens"] = s.tokens;
  auto& types = j["types"] = nlohmann::ordered_json::array();
  for (const TokenType t : s.types) types.push_back(static_cast<int>(t));
  auto& merges = j["merges"] = nlohmann::ordered_json::array();
  for (const auto& [a, b] : s.merges) merges.push_back({a, b});
  j["pre"] = std::string(pre_tokenizer_name(s.pre));
  j["normalizer"] = normalizer_name(s.normalizer);
  j["add_prefix_space"] = s.add_prefix_space;
  j["ignore_merges"] = s.ignore_merges;
  j["bos_id"] = s.bos_id;
  j["eos_id"] = s.eos_id;
  j["add_bos"] = s.add_bos;
  j["add_eos"] = s.add_eos;
  try {
    return j.dump();
  } catch (const json::exception& e) {
    fail("tokenizer: a token or merge is not valid UTF-8 and cannot be written as JSON: {}", e.what());
  }
}

TokenizerSpec parse_tokenizer_spec_json(std::string_view text, const std::string& source) {
  // Containers: the object (0), its arrays (1), each merge pair (2).
  const json j = parse_json_checked(text, source, "tokenizer", /*max_depth=*/3);
  if (!j.is_object()) fail("{}: tokenizer must be a JSON object, got {}", source, j.type_name());
  static const char* const kKeys[] = {"tokens",        "types",  "merges", "pre",     "normalizer", "add_prefix_space",
                                      "ignore_merges", "bos_id", "eos_id", "add_bos", "add_eos"};
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; }) == std::end(kKeys))
      fail("{}: tokenizer key '{}' is not one of the spec's", source, key);
  }
  auto at = [&](const char* key) -> const json& {
    const auto it = j.find(key);
    if (it == j.end()) fail("{}: tokenizer key '{}' is missing", source, key);
    return *it;
  };
  auto string_of = [&](const json& v, const char* key) -> const std::string& {
    if (!v.is_string()) fail("{}: tokenizer key '{}': expected a string, got {}", source, key, json_excerpt(v));
    return v.get_ref<const std::string&>();
  };
  auto boolean = [&](const char* key) {
    const json& v = at(key);
    if (!v.is_boolean()) fail("{}: tokenizer key '{}': expected true or false, got {}", source, key, json_excerpt(v));
    return v.get<bool>();
  };
  auto id = [&](const char* key) {
    const json& v = at(key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < -1 || v.get<std::int64_t>() > INT32_MAX)
      fail("{}: tokenizer key '{}': expected an id (-1 for none), got {}", source, key, json_excerpt(v));
    return static_cast<std::int32_t>(v.get<std::int64_t>());
  };
  auto array = [&](const char* key) -> const json& {
    const json& v = at(key);
    if (!v.is_array()) fail("{}: tokenizer key '{}': expected an array, got {}", source, key, v.type_name());
    return v;
  };

  TokenizerSpec s;
  for (const json& t : array("tokens")) s.tokens.push_back(string_of(t, "tokens"));
  for (const json& t : array("types")) {
    if (!t.is_number_integer() || t.get<std::int64_t>() < 1 || t.get<std::int64_t>() > 6)
      fail("{}: tokenizer key 'types': entry {} is {}, expected a token type 1..6", source, s.types.size(),
           json_excerpt(t));
    s.types.push_back(static_cast<TokenType>(t.get<int>()));
  }
  for (const json& m : array("merges")) {
    if (!m.is_array() || m.size() != 2)
      fail("{}: tokenizer key 'merges': entry {} is {}, expected a pair of strings", source, s.merges.size(),
           json_excerpt(m));
    s.merges.emplace_back(string_of(m[0], "merges"), string_of(m[1], "merges"));
  }
  const std::string& pre = string_of(at("pre"), "pre");
  const auto kind = std::find_if(std::begin(kPreTokenizers), std::end(kPreTokenizers),
                                 [&](PreTokenizer k) { return pre_tokenizer_name(k) == pre; });
  if (kind == std::end(kPreTokenizers))
    fail("{}: tokenizer key 'pre': unknown pre-tokenizer \"{}\" (gpt2, smollm, qwen2, llama3)", source, pre);
  s.pre = *kind;
  const std::string& norm = string_of(at("normalizer"), "normalizer");
  if (norm != "none" && norm != "nfc") fail("{}: tokenizer key 'normalizer': \"{}\" is not none or nfc", source, norm);
  s.normalizer = norm == "nfc" ? Normalizer::nfc : Normalizer::none;
  s.add_prefix_space = boolean("add_prefix_space");
  s.ignore_merges = boolean("ignore_merges");
  s.bos_id = id("bos_id");
  s.eos_id = id("eos_id");
  s.add_bos = boolean("add_bos");
  s.add_eos = boolean("add_eos");
  try {
    (void)Tokenizer(s);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return s;
}

}  // namespace bitrank::io
