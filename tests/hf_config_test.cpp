// Hugging Face config.json reader: the published configs of one model per
// family (tests/data/hf_config) parse to the values the model cards give,
// and missing, mistyped or inconsistent keys are errors naming file and key.
#include "bitrank/io/hf_config.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "bitrank/error.hpp"
#include "support/expect.hpp"

namespace bitrank::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kDir = fs::path(BITRANK_TEST_DATA_DIR) / "hf_config";

json load(const std::string& name) {
  std::ifstream f(kDir / name);
  return json::parse(f);
}

// `base` with one change applied, parsed under the name "cfg.json"; must fail
// naming the file and each piece.
void expect_bad(json base, const std::function<void(json&)>& change, std::initializer_list<std::string> pieces) {
  change(base);
  std::vector<std::string> all{"cfg.json"};
  all.insert(all.end(), pieces.begin(), pieces.end());
  try {
    (void)parse_hf_config(base.dump(), "cfg.json");
    ADD_FAILURE() << "no error; expected one mentioning " << *pieces.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : all) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(HfConfig, SmolLM2Llama) {
  const ModelConfig c = read_hf_config(kDir / "smollm2_135m.json");
  EXPECT_EQ(c.family, ModelFamily::llama);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);  // derived: 576 / 9
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.partial_rotary_factor, 1.0);
  EXPECT_EQ(c.rotary_dim(), 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.is_hybrid());
  EXPECT_TRUE(c.layer_types.empty());
  EXPECT_FALSE(c.linear.has_value());
  EXPECT_FALSE(c.moe.has_value());
}

TEST(HfConfig, Qwen25Qwen2) {
  const ModelConfig c = read_hf_config(kDir / "qwen2_5_0_5b.json");
  EXPECT_EQ(c.family, ModelFamily::qwen2);
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.num_heads, 14);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 4864);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(HfConfig, Qwen3Dense) {
  const ModelConfig c = read_hf_config(kDir / "qwen3_0_6b.json");
  EXPECT_EQ(c.family, ModelFamily::qwen3);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_layers, 28);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // given; 16 · 128 != 1024 is fine for qwen3
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rotary_dim(), 128);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.moe.has_value());
}

TEST(HfConfig, Qwen3NextHybridMoe) {
  const ModelConfig c = read_hf_config(kDir / "qwen3_next_80b_a3b.json");
  EXPECT_EQ(c.family, ModelFamily::qwen3_next);
  EXPECT_TRUE(c.is_hybrid());
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_layers, 48);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.intermediate_size, 5120);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim(), 64);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attn_output_gate);  // no key: Qwen3-Next always gates
  ASSERT_TRUE(c.linear.has_value());
  EXPECT_EQ(c.linear->num_key_heads, 16);
  EXPECT_EQ(c.linear->num_value_heads, 32);
  EXPECT_EQ(c.linear->key_head_dim, 128);
  EXPECT_EQ(c.linear->value_head_dim, 128);
  EXPECT_EQ(c.linear->conv_kernel_dim, 4);
  // No layer_types in the file: from full_attention_interval 4.
  ASSERT_EQ(c.layer_types.size(), 48u);
  int full = 0;
  for (std::size_t i = 0; i < 48; ++i) {
    EXPECT_EQ(c.layer_types[i] == LayerType::full_attention, (i + 1) % 4 == 0) << i;
    full += c.layer_types[i] == LayerType::full_attention;
  }
  EXPECT_EQ(full, 12);
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->num_experts, 512);
  EXPECT_EQ(c.moe->num_experts_per_tok, 10);
  EXPECT_EQ(c.moe->moe_intermediate_size, 512);
  EXPECT_EQ(c.moe->shared_expert_intermediate_size, 512);
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->decoder_sparse_step, 1);
  EXPECT_TRUE(c.moe->mlp_only_layers.empty());
}

void expect_qwen35_27b(const ModelConfig& c) {
  EXPECT_EQ(c.family, ModelFamily::qwen3_5);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.num_layers, 64);
  EXPECT_EQ(c.num_heads, 24);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.intermediate_size, 17408);
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e7);  // from rope_parameters
  EXPECT_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim(), 64);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attn_output_gate);
  ASSERT_TRUE(c.linear.has_value());
  EXPECT_EQ(c.linear->num_key_heads, 16);
  EXPECT_EQ(c.linear->num_value_heads, 48);
  EXPECT_EQ(c.linear->key_head_dim, 128);
  EXPECT_EQ(c.linear->value_head_dim, 128);
  EXPECT_EQ(c.linear->conv_kernel_dim, 4);
  ASSERT_EQ(c.layer_types.size(), 64u);
  for (std::size_t i = 0; i < 64; ++i)
    EXPECT_EQ(c.layer_types[i] == LayerType::full_attention, (i + 1) % 4 == 0) << i;
  EXPECT_FALSE(c.moe.has_value());
}

TEST(HfConfig, Qwen35NestedAndFlatTextConfig) {
  // The published multimodal form: language model under text_config.
  const ModelConfig nested = read_hf_config(kDir / "qwen3_5_27b.json");
  EXPECT_EQ(nested.model_type, "qwen3_5");
  expect_qwen35_27b(nested);

  // The text part on its own (model_type qwen3_5_text).
  const json text = load("qwen3_5_27b.json")["text_config"];
  const ModelConfig flat = parse_hf_config(text.dump(), "text.json");
  EXPECT_EQ(flat.model_type, "qwen3_5_text");
  expect_qwen35_27b(flat);

  // Flat, with the pre-rope_parameters spelling and no layer_types: the
  // interval rule applies.
  json old = text;
  old["model_type"] = "qwen3_5";
  old["rope_theta"] = 1e7;
  old["partial_rotary_factor"] = 0.25;
  old.erase("rope_parameters");
  old.erase("layer_types");
  expect_qwen35_27b(parse_hf_config(old.dump(), "old.json"));

  // A different interval.
  json every2 = text;
  every2.erase("layer_types");
  every2["full_attention_interval"] = 2;
  const ModelConfig c2 = parse_hf_config(every2.dump(), "every2.json");
  for (std::size_t i = 0; i < c2.layer_types.size(); ++i)
    EXPECT_EQ(c2.layer_types[i] == LayerType::full_attention, i % 2 == 1) << i;
}

TEST(HfConfig, FamilyHeadDimRules) {
  // llama may set head_dim freely; without it hidden must divide.
  json llama = load("smollm2_135m.json");
  llama["head_dim"] = 128;
  EXPECT_EQ(parse_hf_config(llama.dump(), "l.json").head_dim, 128);
  // qwen2 fixes head_dim = hidden / heads.
  expect_bad(load("qwen2_5_0_5b.json"), [](json& j) { j["head_dim"] = 128; }, {"'head_dim'", "qwen2"});
  expect_bad(load("qwen2_5_0_5b.json"), [](json& j) { j["num_attention_heads"] = 10; }, {"'num_attention_heads'", "hidden_size"});
  // qwen3 without head_dim derives it.
  json q3 = load("qwen3_0_6b.json");
  q3.erase("head_dim");
  EXPECT_EQ(parse_hf_config(q3.dump(), "q3.json").head_dim, 64);
  // Absent kv heads: one per query head.
  json no_kv = load("qwen2_5_0_5b.json");
  no_kv.erase("num_key_value_heads");
  EXPECT_EQ(parse_hf_config(no_kv.dump(), "q2.json").num_kv_heads, 14);
}

TEST(HfConfig, BadConfigsAreErrors) {
  const json llama = load("smollm2_135m.json");
  const json next = load("qwen3_next_80b_a3b.json");
  const json q35 = load("qwen3_5_27b.json");

  test::expect_error_with([] { (void)read_hf_config(kDir / "missing.json"); }, {"missing.json"});
  test::expect_error_with([] { (void)parse_hf_config("{\"model_type\": ", "cut.json"); }, {"cut.json", "JSON"});
  test::expect_error_with([] { (void)parse_hf_config("[]", "arr.json"); }, {"arr.json", "object"});
  expect_bad(llama, [](json& j) { j.erase("model_type"); }, {"'model_type'"});
  expect_bad(llama, [](json& j) { j["model_type"] = "gpt2"; }, {"'model_type'", "gpt2"});
  expect_bad(llama, [](json& j) { j["model_type"] = 3; }, {"'model_type'"});
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                          "rms_norm_eps", "max_position_embeddings"}) {
    SCOPED_TRACE(key);
    expect_bad(llama, [&](json& j) { j.erase(key); }, {std::string("'") + key + "'", "missing"});
    expect_bad(llama, [&](json& j) { j[key] = "12"; }, {std::string("'") + key + "'"});
    expect_bad(llama, [&](json& j) { j[key] = nullptr; }, {std::string("'") + key + "'"});
  }
  expect_bad(llama, [](json& j) { j.erase("rope_theta"); }, {"'rope_theta'"});
  expect_bad(llama, [](json& j) { j["hidden_size"] = 576.5; }, {"'hidden_size'", "integer"});
  expect_bad(llama, [](json& j) { j["hidden_size"] = true; }, {"'hidden_size'", "integer"});
  expect_bad(llama, [](json& j) { j["hidden_size"] = 0; }, {"'hidden_size'", "positive"});
  expect_bad(llama, [](json& j) { j["vocab_size"] = -5; }, {"'vocab_size'", "positive"});
  expect_bad(llama, [](json& j) { j["vocab_size"] = 1ll << 40; }, {"'vocab_size'"});
  expect_bad(llama, [](json& j) { j["vocab_size"] = 18446744073709551615ull; }, {"'vocab_size'"});
  expect_bad(llama, [](json& j) { j["rms_norm_eps"] = -1e-5; }, {"'rms_norm_eps'", "positive"});
  expect_bad(llama, [](json& j) { j["rope_theta"] = 0; }, {"'rope_theta'", "positive"});
  expect_bad(llama, [](json& j) { j["tie_word_embeddings"] = 1; }, {"'tie_word_embeddings'"});
  expect_bad(llama, [](json& j) { j["num_key_value_heads"] = 2; }, {"'num_key_value_heads'", "divide"});
  expect_bad(llama, [](json& j) { j["num_attention_heads"] = 15; }, {"'num_attention_heads'", "hidden_size"});
  expect_bad(llama, [](json& j) { j["partial_rotary_factor"] = 0.3; }, {"'partial_rotary_factor'"});
  expect_bad(llama, [](json& j) { j["partial_rotary_factor"] = 2.0; }, {"'partial_rotary_factor'"});
  expect_bad(llama, [](json& j) { j["rope_parameters"] = {{"rope_theta", 5.0}}; }, {"rope_theta", "disagrees"});
  expect_bad(llama, [](json& j) { j["rope_parameters"] = 3; }, {"'rope_parameters'"});
  expect_bad(llama, [](json& j) { j["num_hidden_layers"] = 30; j["num_hidden_layers"] = "30"; }, {"'num_hidden_layers'"});
  test::expect_error_with([] { (void)parse_hf_config(R"({"model_type":"llama","model_type":"qwen2"})", "dup.json"); },
               {"dup.json", "duplicate", "model_type"});

  // Hybrid keys.
  for (const char* key : {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                          "linear_conv_kernel_dim"}) {
    SCOPED_TRACE(key);
    expect_bad(next, [&](json& j) { j.erase(key); }, {std::string("'") + key + "'"});
  }
  expect_bad(next, [](json& j) { j["linear_num_value_heads"] = 24; j["linear_num_key_heads"] = 16; },
             {"'linear_num_value_heads'", "multiple"});
  expect_bad(next, [](json& j) { j["full_attention_interval"] = 0; }, {"'full_attention_interval'"});
  expect_bad(next, [](json& j) { j["num_experts_per_tok"] = 600; }, {"'num_experts_per_tok'"});
  expect_bad(next, [](json& j) { j["num_experts"] = -1; }, {"'num_experts'"});
  {  // 0 experts: a dense MLP in every block, not an error.
    json j = next;
    j["num_experts"] = 0;
    const ModelConfig c = parse_hf_config(j.dump(), "next.json");
    ASSERT_TRUE(c.moe.has_value());
    EXPECT_EQ(c.moe->num_experts, 0);
  }
  expect_bad(next, [](json& j) { j["mlp_only_layers"] = {3, 48}; }, {"'mlp_only_layers'", "48"});

  // Nested Qwen3.5: errors name text_config.* keys.
  expect_bad(q35, [](json& j) { j["text_config"].erase("hidden_size"); }, {"'text_config.hidden_size'"});
  expect_bad(q35, [](json& j) { j["text_config"]["layer_types"].erase(0); }, {"'text_config.layer_types'", "63"});
  expect_bad(q35, [](json& j) { j["text_config"]["layer_types"][5] = "sliding_attention"; },
             {"'text_config.layer_types'", "sliding_attention"});
  expect_bad(q35, [](json& j) { j["text_config"]["layer_types"][0] = "full_attention"; },
             {"'text_config.layer_types'", "full_attention_interval"});
  expect_bad(q35, [](json& j) { j["text_config"]["rope_parameters"].erase("rope_theta"); }, {"rope_theta"});
  expect_bad(q35, [](json& j) { j["text_config"]["rope_parameters"]["rope_theta"] = "big"; },
             {"'text_config.rope_parameters.rope_theta'"});
  expect_bad(q35, [](json& j) { j["text_config"]["tie_word_embeddings"] = true; }, {"tie_word_embeddings", "disagrees"});
  expect_bad(q35, [](json& j) { j["text_config"]["model_type"] = "qwen3_next"; }, {"'text_config.model_type'"});
  expect_bad(q35, [](json& j) { j["text_config"] = "x"; }, {"'text_config'"});
}

}  // namespace
}  // namespace bitrank::io
