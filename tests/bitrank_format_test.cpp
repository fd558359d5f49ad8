// The bitrank model file: bit-exact round trips (F32 storage exactly, F16
// storage rounded once and exact from then on, a second save byte-identical),
// the config and tokenizer serialisers (every fixture config, real
// tokenizers), `bitrank info` numbers against hand-computed ones, every kind
// of corrupted or lying file and every kind of bad model refused with an
// Error naming the file and the tensor or key, and the atomic save.
//
// The tiny model: a 1-block llama (hidden 64, 2 heads / 1 kv head of 32,
// ffn 96, vocab 40, tied) with blk.0.attn_q as a 1-path rank-32 BLR matrix
// (64×64) and blk.0.ffn_up as a 2-path rank-64 one (96×64); the other
// projections, norms and the embedding stay dense.
#include "bitrank/store/bitrank_format.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "bitrank/dtype.hpp"
#include "bitrank/error.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/io/safetensors_writer.hpp"
#include "bitrank/rng.hpp"
#include "support/expect.hpp"
#include "support/ggml_q8_0.hpp"
#include "support/temp_dir.hpp"

namespace bitrank::store {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::expect_error_with;
using test::TempDir;

const fs::path kData = fs::path(BITRANK_TEST_DATA_DIR);

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string as_string(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

io::ModelConfig tiny_config() {
  return io::parse_hf_config(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 96, "vocab_size": 40,
      "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true})",
                         "tiny");
}

io::TokenizerSpec tiny_tokenizer() {
  io::TokenizerSpec s;
  s.tokens = {"<s>", "a", "b", "c", "Ġ", "ab", "Ġa", "é"};
  s.types = {io::TokenType::control, io::TokenType::normal, io::TokenType::normal, io::TokenType::normal,
             io::TokenType::normal, io::TokenType::normal, io::TokenType::normal, io::TokenType::user_defined};
  s.merges = {{"a", "b"}, {"Ġ", "a"}};
  s.pre = io::PreTokenizer::smollm;
  s.bos_id = 0;
  s.eos_id = 0;
  s.add_bos = true;
  return s;
}

std::vector<std::uint32_t> random_words(std::size_t n, std::uint64_t seed) {
  XorShift rng(seed);
  std::vector<std::uint32_t> w(n);
  for (auto& x : w) x = static_cast<std::uint32_t>(rng.next_u64() >> 17);
  return w;
}

blr::HostBlrMatrix random_blr(index_t m, index_t n, index_t r, int paths, std::uint64_t seed) {
  blr::HostBlrMatrix w{.m = m, .n = n, .r = r, .paths = {}};
  for (int p = 0; p < paths; ++p) {
    const std::uint64_t s = seed * 16 + static_cast<std::uint64_t>(p) * 4;
    blr::HostBlrPath path;
    path.sign_u = random_words(static_cast<std::size_t>(m * r / 32), s);
    path.sign_v = random_words(static_cast<std::size_t>(n * r / 32), s + 1);
    path.h = rnd(static_cast<std::size_t>(m), s + 2, 0.1f);
    path.l = rnd(static_cast<std::size_t>(r), s + 3, 2.0f);
    path.g = rnd(static_cast<std::size_t>(n), s + 4, 1.0f);
    w.paths.push_back(std::move(path));
  }
  // Awkward scales for F16: a subnormal, a tie, the largest finite F16, -0.
  w.paths[0].h[0] = 3e-7f;
  w.paths[0].h[1] = 1.0f + 1.0f / 2048.0f;
  w.paths[0].l[0] = 65504.0f;
  w.paths[0].g[0] = -0.0f;
  return w;
}

HostTensor random_dense(std::vector<index_t> shape, std::uint64_t seed) {
  std::size_t n = 1;
  for (const index_t d : shape) n *= static_cast<std::size_t>(d);
  return {std::move(shape), rnd(n, seed, 0.5f)};
}

CompressedModel tiny_model(Storage storage) {
  CompressedModel m;
  m.config = tiny_config();
  m.tokenizer = tiny_tokenizer();
  m.storage = storage;
  m.blr["blk.0.attn_q"] = random_blr(64, 64, 32, 1, 1);
  m.blr["blk.0.ffn_up"] = random_blr(96, 64, 64, 2, 2);
  std::uint64_t seed = 100;
  for (const auto& [name, shape] :
       std::vector<std::pair<std::string, std::vector<index_t>>>{{"token_embd.weight", {40, 64}},
                                                                 {"blk.0.attn_norm.weight", {64}},
                                                                 {"blk.0.attn_k.weight", {32, 64}},
                                                                 {"blk.0.attn_v.weight", {32, 64}},
                                                                 {"blk.0.attn_output.weight", {64, 64}},
                                                                 {"blk.0.ffn_norm.weight", {64}},
                                                                 {"blk.0.ffn_gate.weight", {96, 64}},
                                                                 {"blk.0.ffn_down.weight", {64, 96}},
                                                                 {"output_norm.weight", {64}}})
    m.dense[name] = random_dense(shape, seed++);
  m.summary = {{"steps", 120}, {"final_loss", 2.718281828}, {"objective", "layer"}, {"note", "ünïcode"}};
  return m;
}

void expect_same_bits(std::span<const float> got, std::span<const float> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (f32_bits(got[i]) != f32_bits(want[i]) && bad++ < 3)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " != " << want[i];
}

std::vector<float> rounded_f16(std::span<const float> v) {
  std::vector<float> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = round_f16(v[i]);
  return r;
}

// `got` equals `want` with every stored value as `want`'s storage keeps it.
void expect_model_eq(const CompressedModel& got, const CompressedModel& want) {
  EXPECT_TRUE(got.config == want.config);
  ASSERT_EQ(got.tokenizer.has_value(), want.tokenizer.has_value());
  if (want.tokenizer) {
    EXPECT_TRUE(*got.tokenizer == *want.tokenizer);
  }
  EXPECT_EQ(got.storage, want.storage);
  EXPECT_EQ(got.summary, want.summary);
  auto stored = [](std::span<const float> v, StoredFloat s) {
    return s == StoredFloat::f16 ? rounded_f16(v) : std::vector<float>(v.begin(), v.end());
  };
  ASSERT_EQ(got.dense.size(), want.dense.size());
  for (const auto& [name, t] : want.dense) {
    ASSERT_TRUE(got.dense.contains(name)) << name;
    EXPECT_EQ(got.dense.at(name).shape, t.shape) << name;
    expect_same_bits(got.dense.at(name).values, stored(t.values, want.storage.dense), name);
  }
  ASSERT_EQ(got.blr.size(), want.blr.size());
  for (const auto& [name, w] : want.blr) {
    ASSERT_TRUE(got.blr.contains(name)) << name;
    const blr::HostBlrMatrix& g = got.blr.at(name);
    EXPECT_EQ(g.m, w.m);
    EXPECT_EQ(g.n, w.n);
    EXPECT_EQ(g.r, w.r);
    ASSERT_EQ(g.paths.size(), w.paths.size()) << name;
    for (std::size_t p = 0; p < w.paths.size(); ++p) {
      const std::string at = name + ".p" + std::to_string(p);
      EXPECT_EQ(g.paths[p].sign_u, w.paths[p].sign_u) << at;
      EXPECT_EQ(g.paths[p].sign_v, w.paths[p].sign_v) << at;
      expect_same_bits(g.paths[p].h, stored(w.paths[p].h, want.storage.scales), at + ".h");
      expect_same_bits(g.paths[p].l, stored(w.paths[p].l, want.storage.scales), at + ".l");
      expect_same_bits(g.paths[p].g, stored(w.paths[p].g, want.storage.scales), at + ".g");
    }
  }
}

// ---- round trips -------------------------------------------------------------------

TEST(BitrankFormat, RoundTripF32IsBitExact) {
  const TempDir dir;
  const CompressedModel model = tiny_model({.scales = StoredFloat::f32, .dense = StoredFloat::f32});
  const fs::path file = dir.path() / "tiny.bitrank";
  save_bitrank(file, model);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"tiny.bitrank"});
  const CompressedModel back = load_bitrank(file);
  expect_model_eq(back, model);
  // The file as stored: the tensor names and dtypes of the format.
  const io::Safetensors st = io::Safetensors::open(file);
  EXPECT_EQ(st.info("blk.0.attn_q.p0.su").dtype, io::StDType::U32);
  EXPECT_EQ(st.info("blk.0.attn_q.p0.su").shape, (std::vector<std::int64_t>{64, 1}));
  EXPECT_EQ(st.info("blk.0.ffn_up.p1.sv").shape, (std::vector<std::int64_t>{64, 2}));
  EXPECT_EQ(st.info("blk.0.ffn_up.p1.l").dtype, io::StDType::F32);
  EXPECT_EQ(st.info("token_embd.weight").dtype, io::StDType::F32);
  EXPECT_EQ(st.tensors().size(), 3u * 5 + 9);
  EXPECT_EQ(st.metadata().at("bitrank.format"), "bitrank");
  EXPECT_EQ(st.metadata().at("bitrank.version"), "2");
  // Saving what was loaded writes the same bytes; the in-memory image too.
  save_bitrank(dir.path() / "again.bitrank", back);
  EXPECT_EQ(slurp(dir.path() / "again.bitrank"), slurp(file));
  EXPECT_EQ(as_string(bitrank_image(model)), slurp(file));
  expect_model_eq(load_bitrank(bitrank_image(model), "image"), model);
}

TEST(BitrankFormat, RoundTripF16RoundsOnceThenIsExact) {
  const TempDir dir;
  const CompressedModel model = tiny_model({.scales = StoredFloat::f16, .dense = StoredFloat::f16});
  const fs::path file = dir.path() / "tiny16.bitrank";
  save_bitrank(file, model);
  const CompressedModel back = load_bitrank(file);
  expect_model_eq(back, model);  // every value is round_f16 of the original
  // The rounding did something (else the test proves nothing) and kept the awkward values.
  const auto& h = back.blr.at("blk.0.attn_q").paths[0].h;
  EXPECT_NE(f32_bits(back.blr.at("blk.0.ffn_up").paths[1].l[5]), f32_bits(model.blr.at("blk.0.ffn_up").paths[1].l[5]));
  EXPECT_EQ(h[0], round_f16(3e-7f));
  EXPECT_GT(h[0], 0.0f);
  EXPECT_EQ(h[1], 1.0f);  // the tie rounds to even
  EXPECT_EQ(back.blr.at("blk.0.attn_q").paths[0].l[0], 65504.0f);
  EXPECT_TRUE(std::signbit(back.blr.at("blk.0.attn_q").paths[0].g[0]));
  EXPECT_EQ(io::Safetensors::open(file).info("blk.0.attn_q.p0.h").dtype, io::StDType::F16);
  EXPECT_EQ(io::Safetensors::open(file).info("output_norm.weight").dtype, io::StDType::F16);
  // From the first rounding on, F16 is exact: the same file, the same values.
  save_bitrank(dir.path() / "again.bitrank", back);
  EXPECT_EQ(slurp(dir.path() / "again.bitrank"), slurp(file));
  expect_model_eq(load_bitrank(dir.path() / "again.bitrank"), back);
  // F16 scales, F32 dense (the default storage) mixes correctly too.
  CompressedModel mixed = model;
  mixed.storage = Storage{};
  expect_model_eq(load_bitrank(bitrank_image(mixed), "mixed"), mixed);
}

TEST(BitrankFormat, WithoutTokenizerAndWithoutBlr) {
  CompressedModel m = tiny_model({});
  m.tokenizer.reset();
  m.blr.clear();
  m.summary = json::object();
  const CompressedModel back = load_bitrank(bitrank_image(m), "plain");
  expect_model_eq(back, m);
  EXPECT_TRUE(bitrank_accounting(back)["blr"]["bpw"].is_null());
}

// A dense tensor named like a bias of a BLR matrix is its own tensor.
TEST(BitrankFormat, DenseNeighboursOfABlrMatrixAreKept) {
  CompressedModel m = tiny_model({});
  m.dense["blk.0.attn_q.bias"] = random_dense({64}, 7);
  m.dense["blk.0.attn_q.p0"] = random_dense({2}, 8);     // no part suffix
  m.dense["blk.0.attn_q.px.su"] = random_dense({2}, 9);  // no path number
  expect_model_eq(load_bitrank(bitrank_image(m), "neighbours"), m);
}

// ---- the serialisers ---------------------------------------------------------------

// A dense matrix that Q8_0 blocks hold exactly (a GGUF's Q8_0 tensor
// dequantised) is stored as those blocks, read back bit for bit, counted at
// 8.5 bits a value; with F16 dense storage it keeps values f16 would round.
TEST(BitrankFormat, ExactQ8_0MatricesAreStoredAsBlocks) {
  CompressedModel m = tiny_model({.scales = StoredFloat::f16, .dense = StoredFloat::f16});
  auto& table = m.dense.at("token_embd.weight").values;
  table = test::as_ggml_q8_0(table);
  ASSERT_NE(round_f16(table[1]), table[1]);  // f16 would round this one
  EXPECT_TRUE(m.q8_0_blocks.empty());
  record_exact_q8_0(m);
  ASSERT_EQ(m.q8_0_blocks.size(), 1u);  // the table only: no other matrix is exact Q8_0 here
  ASSERT_TRUE(m.q8_0_blocks.contains("token_embd.weight"));
  const auto image = bitrank_image(m);
  const io::Safetensors st = io::Safetensors::from_memory(image, "q8");
  EXPECT_FALSE(st.contains("token_embd.weight"));
  EXPECT_EQ(st.info("token_embd.weight.q8_0").dtype, io::StDType::I8);
  EXPECT_EQ(st.info("token_embd.weight.q8_0").shape, (std::vector<std::int64_t>{40, 64}));
  EXPECT_EQ(st.info("token_embd.weight.q8_0_scale").dtype, io::StDType::F16);
  EXPECT_EQ(st.info("token_embd.weight.q8_0_scale").shape, (std::vector<std::int64_t>{40, 2}));
  EXPECT_EQ(json::parse(st.metadata().at("bitrank.storage"))["q8_0"], json::array({"token_embd.weight"}));
  const CompressedModel back = load_bitrank(image, "q8");
  expect_same_bits(back.dense.at("token_embd.weight").values, table, "token_embd.weight");
  EXPECT_EQ(back.q8_0_blocks.size(), 1u);  // the blocks as read, for the model and a second save
  EXPECT_EQ(std::memcmp(back.q8_0_blocks.at("token_embd.weight").data(), m.q8_0_blocks.at("token_embd.weight").data(),
                        m.q8_0_blocks.at("token_embd.weight").size() * sizeof(q8_0)),
            0);
  EXPECT_EQ(as_string(bitrank_image(back)), as_string(image));  // a second save: the same bytes
  const json acc = bitrank_accounting(back);
  EXPECT_EQ(acc["dense"]["q8_0_params"].get<std::uint64_t>(), 40u * 64);
  EXPECT_EQ(acc["dense"]["bits"].get<std::uint64_t>(), 40u * 64 * 8 + 40u * 2 * 16 + (23232u - 40 * 64) * 16);
  // Nothing else is exact Q8_0 here: every other matrix stays F16.
  EXPECT_EQ(st.info("blk.0.ffn_gate.weight").dtype, io::StDType::F16);
  // A version 1 file (no Q8_0) still reads, and a second save writes it again unchanged.
  CompressedModel v1 = tiny_model({.scales = StoredFloat::f16, .dense = StoredFloat::f16, .q8_0 = false});
  const auto v1_image = bitrank_image(v1);
  EXPECT_EQ(io::Safetensors::from_memory(v1_image, "v1").metadata().at("bitrank.version"), "1");
  const CompressedModel v1_back = load_bitrank(v1_image, "v1");
  EXPECT_FALSE(v1_back.storage.q8_0);
  EXPECT_EQ(as_string(bitrank_image(v1_back)), as_string(v1_image));
}

TEST(BitrankFormat, ConfigJsonReadsBackEqualForEveryFixture) {
  int checked = 0;
  for (const auto& e : fs::directory_iterator(kData / "hf_config")) {
    const io::ModelConfig c = io::read_hf_config(e.path());
    const std::string text = io::hf_config_to_json(c, e.path().string());
    EXPECT_TRUE(io::parse_hf_config(text, "again") == c) << e.path();
    ++checked;
  }
  EXPECT_GE(checked, 5);
  // The hybrid MoE one through a whole file.
  CompressedModel m = tiny_model({});
  m.config = io::read_hf_config(kData / "hf_config" / "qwen3_next_80b_a3b.json");
  ASSERT_TRUE(m.config.moe && m.config.linear && m.config.is_hybrid());
  m.tokenizer.reset();
  EXPECT_TRUE(load_bitrank(bitrank_image(m), "hybrid").config == m.config);
}

TEST(BitrankFormat, ConfigThatWouldNotReadBackIsRefused) {
  io::ModelConfig c = tiny_config();
  c.linear = io::LinearAttentionConfig{1, 1, 1, 1, 1};  // a dense family has no GDN sizes
  expect_error_with([&] { (void)io::hf_config_to_json(c, "here"); }, {"here", "does not read back"});
  c = tiny_config();
  c.head_dim = 33;  // an odd rotary width
  expect_error_with([&] { (void)io::hf_config_to_json(c, "here"); }, {"here", "partial_rotary_factor"});
  c = tiny_config();
  c.model_type = "gpt9";
  expect_error_with([&] { (void)io::hf_config_to_json(c, "here"); }, {"here", "model_type"});
}

TEST(BitrankFormat, TokenizerSpecJsonReadsBackEqual) {
  std::vector<io::TokenizerSpec> specs{tiny_tokenizer(), io::load_tokenizer_json(kData / "tokenizer" / "smollm.json"),
                                       io::load_tokenizer_json(kData / "tokenizer" / "qwen2.json")};
  specs[0].normalizer = io::Normalizer::nfc;
  specs[0].ignore_merges = true;
  specs[0].add_prefix_space = true;
  specs[0].add_eos = true;
  const std::string gguf = BITRANK_SMOLLM2_GGUF;
  if (!gguf.empty()) specs.push_back(io::tokenizer_spec_from_gguf(io::GgufFile::open(gguf, {.verify_data = false})));
  for (const io::TokenizerSpec& s : specs) {
    const io::TokenizerSpec back = io::parse_tokenizer_spec_json(io::tokenizer_spec_to_json(s), "spec");
    EXPECT_TRUE(back == s) << s.tokens.size() << " tokens";
  }
  // A token that is not UTF-8 cannot go into JSON metadata.
  io::TokenizerSpec bad = tiny_tokenizer();
  bad.tokens[7] = "\xff";
  expect_error_with([&] { (void)io::tokenizer_spec_to_json(bad); }, {"UTF-8"});
}

// ---- bitrank info --------------------------------------------------------------------

TEST(BitrankFormat, InfoReportsTheHonestNumbers) {
  const TempDir dir;
  const fs::path file = dir.path() / "tiny.bitrank";
  save_bitrank(file, tiny_model({}));  // F16 scales, F32 dense
  const auto d = describe_bitrank(file);
  // By hand (DESIGN §1: P·(r(m+n) + 16(m+r+n)) bits):
  //   attn_q  64×64,  r 32, P 1: 32·128 + 16·160 = 6656 bits / 4096 = 1.625 bpw
  //   ffn_up  96×64,  r 64, P 2: 2·(64·160 + 16·224) = 27648 bits / 6144 = 4.5 bpw
  //   BLR: 10240 weights, 34304 bits, 3.35 bpw
  //   dense: 2560 + 3·64 + 2·2048 + 4096 + 2·6144 = 23232 params, ·32 = 743424 bits
  //   model: 33472 params, 777728 bits, 23.2351816... bpw
  const auto& acc = d.at("accounting");
  EXPECT_EQ(acc.at("matrices").at("blk.0.attn_q").at("bits").get<std::uint64_t>(), 6656u);
  EXPECT_DOUBLE_EQ(acc.at("matrices").at("blk.0.attn_q").at("bpw").get<double>(), 1.625);
  EXPECT_EQ(acc.at("matrices").at("blk.0.ffn_up").at("bits").get<std::uint64_t>(), 27648u);
  EXPECT_DOUBLE_EQ(acc.at("matrices").at("blk.0.ffn_up").at("bpw").get<double>(), 4.5);
  EXPECT_EQ(acc.at("blr").at("weights").get<std::uint64_t>(), 10240u);
  EXPECT_EQ(acc.at("blr").at("bits").get<std::uint64_t>(), 34304u);
  EXPECT_DOUBLE_EQ(acc.at("blr").at("bpw").get<double>(), 3.35);
  EXPECT_EQ(acc.at("dense").at("params").get<std::uint64_t>(), 23232u);
  EXPECT_EQ(acc.at("dense").at("bits").get<std::uint64_t>(), 743424u);
  EXPECT_EQ(acc.at("model").at("params").get<std::uint64_t>(), 33472u);
  EXPECT_EQ(acc.at("model").at("bits").get<std::uint64_t>(), 777728u);
  EXPECT_DOUBLE_EQ(acc.at("model").at("bpw").get<double>(), 777728.0 / 33472.0);
  EXPECT_EQ(d.at("file_bytes").get<std::uint64_t>(), fs::file_size(file));
  EXPECT_EQ(d.at("architecture").at("hidden_size").get<int>(), 64);
  EXPECT_EQ(d.at("tokenizer").at("tokens").get<int>(), 8);
  EXPECT_EQ(d.at("summary").at("steps").get<int>(), 120);
  EXPECT_EQ(d.at("storage").at("scales").get<std::string>(), "F16");

  const std::string text = describe_bitrank_text(d);
  for (const std::string& piece : std::vector<std::string>{
           "llama: 1 layers, hidden 64, 2 heads / 1 kv heads × 32, ffn 96, vocab 40, tied head",
           "smollm, 8 tokens, 2 merges", "scales F16, dense F32", "BLR matrices (2)", "blk.0.attn_q", "64×64", "1.6250",
           "blk.0.ffn_up", "96×64", "4.5000", "10240 weights, 34304 bits, 3.3500 bpw", "23232 params, 743424 bits",
           "33472 params, 777728 bits, 23.2352 bpw", std::to_string(fs::file_size(file)) + " bytes",
           "\"final_loss\": 2.718281828", "\"objective\": \"layer\""})
    EXPECT_NE(text.find(piece), std::string::npos) << "'" << piece << "' not in:\n" << text;
}

// ---- corrupted and lying files -----------------------------------------------------

// The tensors and metadata of a bitrank file image, editable, and back.
struct Parts {
  struct T {
    io::StDType dtype;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> bytes;
  };
  std::map<std::string, T> tensors;
  std::map<std::string, std::string> meta;

  explicit Parts(std::span<const std::byte> image) {
    const io::Safetensors st = io::Safetensors::from_memory(image, "parts");
    meta = st.metadata();
    for (const io::TensorInfo& t : st.tensors()) {
      const auto b = st.bytes(t.name);
      tensors[t.name] = {t.dtype, t.shape, std::vector<std::byte>(b.begin(), b.end())};
    }
  }
  std::vector<std::byte> image() const {
    std::vector<io::StTensorOut> out;
    for (const auto& [name, t] : tensors) out.push_back(io::StTensorOut::raw(name, t.dtype, t.shape, t.bytes));
    return io::safetensors_image(out, meta);
  }
  json meta_json(const std::string& key) const { return json::parse(meta.at(key)); }
  void set_meta_json(const std::string& key, const json& j) { meta[key] = j.dump(); }
  // Sets element i of an F16 tensor.
  void set_f16(const std::string& name, std::size_t i, float v) {
    const std::uint16_t bits = to_f16(v).bits;
    std::memcpy(tensors.at(name).bytes.data() + 2 * i, &bits, 2);
  }
};

// `change` applied to the tiny model's file must make load fail naming the file and every piece.
void expect_bad_file(const std::function<void(Parts&)>& change, std::initializer_list<std::string> pieces) {
  static const std::vector<std::byte> good = bitrank_image(tiny_model({}));
  Parts parts(good);
  change(parts);
  const auto image = parts.image();
  std::vector<std::string> all{"bad.bitrank"};
  all.insert(all.end(), pieces.begin(), pieces.end());
  try {
    (void)load_bitrank(image, "bad.bitrank");
    ADD_FAILURE() << "no error; expected one mentioning " << *pieces.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : all) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(BitrankFormat, TruncatedFileIsAnError) {
  const TempDir dir;
  const fs::path file = dir.path() / "cut.bitrank";
  const auto image = bitrank_image(tiny_model({}));
  for (const std::size_t keep :
       {std::size_t{0}, std::size_t{5}, std::size_t{200}, image.size() / 2, image.size() - 1}) {
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(keep));
    expect_error_with([&] { (void)load_bitrank(file); }, {"cut.bitrank"});
  }
  expect_error_with([&] { (void)load_bitrank(dir.path() / "absent.bitrank"); }, {"absent.bitrank"});
}

TEST(BitrankFormat, WrongFormatOrVersionIsAnError) {
  expect_bad_file([](Parts& p) { p.meta["bitrank.version"] = "3"; }, {"bitrank.version", "\"3\"", "versions 1 and 2"});
  expect_bad_file([](Parts& p) { p.meta.erase("bitrank.version"); }, {"bitrank.version", "missing"});
  expect_bad_file([](Parts& p) { p.meta["bitrank.format"] = "gguf"; }, {"bitrank.format", "gguf"});
  expect_bad_file([](Parts& p) { p.meta.clear(); }, {"bitrank.format", "missing"});
}

TEST(BitrankFormat, BadConfigIsAnError) {
  expect_bad_file([](Parts& p) { p.meta["bitrank.config"] = "{\"model_type\": \"llama\", "; },
                  {"bitrank.config", "JSON"});
  expect_bad_file([](Parts& p) { p.meta.erase("bitrank.config"); }, {"bitrank.config", "missing"});
  expect_bad_file(
      [](Parts& p) {
        json c = p.meta_json("bitrank.config");
        c["hidden_size"] = -64;
        p.set_meta_json("bitrank.config", c);
      },
      {"bitrank.config", "hidden_size"});
  expect_bad_file(
      [](Parts& p) {
        json c = p.meta_json("bitrank.config");
        c["vocab_size"] = 4;  // fewer than the tokenizer's 8 tokens
        p.set_meta_json("bitrank.config", c);
      },
      {"tokenizer", "8 tokens", "vocab_size 4"});
}

TEST(BitrankFormat, LyingTokenizerIsAnError) {
  auto edit = [](const std::function<void(json&)>& f) {
    return [f](Parts& p) {
      json t = p.meta_json("bitrank.tokenizer");
      f(t);
      p.set_meta_json("bitrank.tokenizer", t);
    };
  };
  expect_bad_file(edit([](json& t) { t["types"].erase(t["types"].size() - 1); }),
                  {"bitrank.tokenizer", "7 token types for 8 tokens"});
  expect_bad_file(edit([](json& t) { t["bos_id"] = 8; }), {"bitrank.tokenizer", "bos/eos id 8"});
  expect_bad_file(edit([](json& t) { t["merges"].push_back({"b", "c"}); }), {"bitrank.tokenizer", "merge 2"});
  expect_bad_file(edit([](json& t) { t["types"][1] = 9; }), {"bitrank.tokenizer", "'types'", "entry 1"});
  expect_bad_file(edit([](json& t) { t["pre"] = "bert"; }), {"bitrank.tokenizer", "'pre'", "bert"});
  expect_bad_file(edit([](json& t) { t.erase("add_bos"); }), {"bitrank.tokenizer", "'add_bos'", "missing"});
  expect_bad_file(edit([](json& t) { t["extra"] = 1; }), {"bitrank.tokenizer", "'extra'"});
  expect_bad_file([](Parts& p) { p.meta["bitrank.tokenizer"] = "[1, 2"; }, {"bitrank.tokenizer", "JSON"});
}

TEST(BitrankFormat, IncompleteOrInconsistentBlrIsAnError) {
  expect_bad_file([](Parts& p) { p.tensors.erase("blk.0.ffn_up.p1.sv"); },
                  {"'blk.0.ffn_up.p1.sv'", "BLR matrix 'blk.0.ffn_up'", "missing"});
  expect_bad_file([](Parts& p) { p.tensors.erase("blk.0.attn_q.p0.g"); }, {"'blk.0.attn_q.p0.g'", "missing"});
  expect_bad_file(
      [](Parts& p) {  // a bitmap with a word too many per row
        auto& t = p.tensors.at("blk.0.attn_q.p0.su");
        t.shape = {64, 2};
        t.bytes.resize(64 * 2 * 4);
      },
      {"'blk.0.attn_q.p0.su'", "shape [64, 2]", "expected [64, 1]"});
  expect_bad_file(
      [](Parts& p) {  // a bitmap with a row too few
        auto& t = p.tensors.at("blk.0.ffn_up.p0.sv");
        t.shape = {63, 2};
        t.bytes.resize(63 * 2 * 4);
      },
      {"'blk.0.ffn_up.p0.sv'", "shape [63, 2]", "expected [64, 2]"});
  expect_bad_file([](Parts& p) { p.tensors.at("blk.0.attn_q.p0.su").dtype = io::StDType::F32; },
                  {"'blk.0.attn_q.p0.su'", "dtype F32", "expected U32"});
  expect_bad_file(
      [](Parts& p) {  // scales stored as F32 where the storage says F16
        auto& t = p.tensors.at("blk.0.attn_q.p0.l");
        t.dtype = io::StDType::F32;
        t.shape = {16};
      },
      {"'blk.0.attn_q.p0.l'", "dtype F32", "expected F16"});
  expect_bad_file(
      [](Parts& p) {  // ℓ one short
        auto& t = p.tensors.at("blk.0.ffn_up.p1.l");
        t.shape = {63};
        t.bytes.resize(63 * 2);
      },
      {"'blk.0.ffn_up.p1.l'", "shape [63]", "expected [64]"});
  auto index = [](const std::function<void(json&)>& f) {
    return [f](Parts& p) {
      json j = p.meta_json("bitrank.blr");
      f(j);
      p.set_meta_json("bitrank.blr", j);
    };
  };
  expect_bad_file(index([](json& j) { j["blk.0.attn_q"]["rank"] = 48; }),
                  {"bitrank.blr", "'blk.0.attn_q'", "rank 48", "multiple of 32"});
  expect_bad_file(index([](json& j) { j["blk.0.attn_q"]["rank"] = 0; }), {"bitrank.blr", "'rank'"});
  expect_bad_file(index([](json& j) { j["blk.0.attn_q"]["m"] = 32; }), {"'blk.0.attn_q.p0.su'", "expected [32, 1]"});
  expect_bad_file(index([](json& j) { j["blk.0.ffn_up"]["paths"] = 3; }), {"'blk.0.ffn_up.p2.su'", "missing"});
  expect_bad_file(index([](json& j) { j["blk.0.ffn_up"]["paths"] = 9; }), {"bitrank.blr", "'paths'", "1..8"});
  expect_bad_file(index([](json& j) { j["blk.0.ffn_up"]["paths"] = 1; }),
                  {"'blk.0.ffn_up.p1.", "BLR matrix 'blk.0.ffn_up'", "1 paths"});
  expect_bad_file(index([](json& j) { j["blk.0.attn_q"].erase("n"); }), {"bitrank.blr", "'blk.0.attn_q'"});
  expect_bad_file(index([](json& j) { j.erase("blk.0.attn_q"); }), {"'blk.0.attn_q.p0.", "dtype"});
  expect_bad_file([](Parts& p) { p.meta.erase("bitrank.blr"); }, {"bitrank.blr", "missing"});
}

TEST(BitrankFormat, NonFiniteValuesAreAnError) {
  expect_bad_file([](Parts& p) { p.set_f16("blk.0.ffn_up.p1.l", 5, std::numeric_limits<float>::quiet_NaN()); },
                  {"'blk.0.ffn_up.p1.l'", "index 5", "not finite"});
  expect_bad_file([](Parts& p) { p.set_f16("blk.0.attn_q.p0.h", 63, std::numeric_limits<float>::infinity()); },
                  {"'blk.0.attn_q.p0.h'", "index 63", "not finite"});
  expect_bad_file(
      [](Parts& p) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(p.tensors.at("token_embd.weight").bytes.data() + 4 * 17, &nan, 4);
      },
      {"'token_embd.weight'", "index 17", "not finite"});
}

TEST(BitrankFormat, StrayTensorsAndOtherMetadataLiesAreAnError) {
  expect_bad_file(
      [](Parts& p) {  // a dense tensor shadowing a BLR matrix
        p.tensors["blk.0.attn_q.weight"] = {io::StDType::F32, {1}, std::vector<std::byte>(4)};
      },
      {"'blk.0.attn_q.weight'", "BLR matrix 'blk.0.attn_q'"});
  expect_bad_file(
      [](Parts& p) {
        p.tensors["extra.bits"] = {io::StDType::U32, {1}, std::vector<std::byte>(4)};
      },
      {"'extra.bits'", "dtype U32", "expected F32"});
  expect_bad_file(
      [](Parts& p) {
        p.tensors["scalar"] = {io::StDType::F32, {}, std::vector<std::byte>(4)};
      },
      {"'scalar'", "no dimensions"});
  expect_bad_file(
      [](Parts& p) {
        p.tensors.at("output_norm.weight").dtype = io::StDType::BF16;
        p.tensors.at("output_norm.weight").shape = {128};
      },
      {"'output_norm.weight'", "dtype BF16"});
  expect_bad_file([](Parts& p) { p.meta["bitrank.storage"] = R"({"scales": "F8", "dense": "F32"})"; },
                  {"bitrank.storage", "'scales'", "F8"});
  expect_bad_file(
      [](Parts& p) {
        json a = p.meta_json("bitrank.accounting");
        a["blr"]["bits"] = 1000;
        p.set_meta_json("bitrank.accounting", a);
      },
      {"bitrank.accounting", "/blr/bits", "stored 1000", "computed 34304"});
  expect_bad_file(
      [](Parts& p) {
        json a = p.meta_json("bitrank.accounting");
        a["matrices"]["blk.0.attn_q"]["bpw"] = 1.0;
        p.set_meta_json("bitrank.accounting", a);
      },
      {"bitrank.accounting", "/matrices/blk.0.attn_q/bpw"});
  expect_bad_file([](Parts& p) { p.meta.erase("bitrank.accounting"); }, {"bitrank.accounting", "missing"});
  expect_bad_file([](Parts& p) { p.meta["bitrank.summary"] = "[1, 2]"; }, {"bitrank.summary", "object"});
}

// ---- bad models are refused by save ------------------------------------------------

TEST(BitrankFormat, BadQ8_0TensorsAreAnError) {
  CompressedModel m = tiny_model({});
  m.dense.at("token_embd.weight").values = test::as_ggml_q8_0(m.dense.at("token_embd.weight").values);
  record_exact_q8_0(m);
  const auto good = bitrank_image(m);
  auto expect_bad = [&](const std::function<void(Parts&)>& change, std::initializer_list<std::string> pieces) {
    Parts parts(good);
    change(parts);
    expect_error_with([&] { (void)load_bitrank(parts.image(), "bad.bitrank"); }, pieces);
  };
  expect_bad([](Parts& p) { p.tensors.erase("token_embd.weight.q8_0_scale"); },
             {"bad.bitrank", "token_embd.weight.q8_0_scale", "missing"});
  expect_bad([](Parts& p) { p.tensors.at("token_embd.weight.q8_0").dtype = io::StDType::U8; },
             {"token_embd.weight.q8_0", "dtype U8", "I8"});
  expect_bad(
      [](Parts& p) {
        auto& d = p.tensors.at("token_embd.weight.q8_0_scale");
        d.shape = {40, 1};
        d.bytes.resize(80);
      },
      {"token_embd.weight.q8_0_scale", "[40, 1]", "[40, 2]"});
  expect_bad(
      [](Parts& p) {
        json s = p.meta_json("bitrank.storage");
        s["q8_0"].push_back("output.weight");
        p.set_meta_json("bitrank.storage", s);
      },
      {"output.weight.q8_0", "missing"});
  expect_bad(
      [](Parts& p) {
        json s = p.meta_json("bitrank.storage");
        s.erase("q8_0");
        p.set_meta_json("bitrank.storage", s);
      },
      {"bitrank.storage", "q8_0"});
  expect_bad(  // the blocks left in place but not listed: stray tensors
      [](Parts& p) {
        json s = p.meta_json("bitrank.storage");
        s["q8_0"] = json::array();
        p.set_meta_json("bitrank.storage", s);
      },
      {"token_embd.weight"});
}

TEST(BitrankFormat, SaveRefusesABadModelAndWritesNothing) {
  const TempDir dir;
  const fs::path file = dir.path() / "bad.bitrank";
  auto expect_refused = [&](const std::function<void(CompressedModel&)>& change,
                            std::initializer_list<std::string> pieces) {
    CompressedModel m = tiny_model({});
    change(m);
    std::vector<std::string> all{"bad.bitrank"};
    all.insert(all.end(), pieces.begin(), pieces.end());
    try {
      save_bitrank(file, m);
      ADD_FAILURE() << "saved; expected an error mentioning " << *pieces.begin();
    } catch (const Error& e) {
      const std::string msg = e.what();
      for (const auto& p : all) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
    EXPECT_TRUE(dir.entries().empty());
  };
  expect_refused([](CompressedModel& m) { m.blr["blk.0.attn_q"].r = 48; }, {"'blk.0.attn_q'", "rank 48"});
  expect_refused([](CompressedModel& m) { m.blr["blk.0.attn_q"].paths[0].sign_u.pop_back(); },
                 {"'blk.0.attn_q.p0.su'", "63 elements, expected 64"});
  expect_refused([](CompressedModel& m) { m.blr["blk.0.ffn_up"].paths[1].g.push_back(1); },
                 {"'blk.0.ffn_up.p1.g'", "65 elements"});
  expect_refused([](CompressedModel& m) { m.blr["blk.0.ffn_up"].paths[1].l[3] = std::nanf(""); },
                 {"'blk.0.ffn_up.p1.l'", "index 3", "not finite"});
  expect_refused([](CompressedModel& m) { m.blr["blk.0.attn_q"].paths[0].h[2] = 1e6f; },
                 {"'blk.0.attn_q.p0.h'", "index 2", "overflows F16"});
  expect_refused([](CompressedModel& m) { m.blr["blk.0.attn_q"].paths.clear(); }, {"'blk.0.attn_q'", "0 paths"});
  expect_refused([](CompressedModel& m) { m.blr["blk.0.attn_q"].m = 0; }, {"'blk.0.attn_q'", "size 0×64"});
  expect_refused([](CompressedModel& m) { m.dense["blk.0.ffn_norm.weight"].values.pop_back(); },
                 {"'blk.0.ffn_norm.weight'", "63 values for shape [64]"});
  expect_refused([](CompressedModel& m) { m.dense["output_norm.weight"].values[0] = INFINITY; },
                 {"'output_norm.weight'", "not finite"});
  expect_refused(
      [](CompressedModel& m) {
        m.dense["blk.0.attn_q.weight"] = random_dense({64, 64}, 1);
      },
      {"'blk.0.attn_q.weight'", "BLR matrix 'blk.0.attn_q'"});
  expect_refused([](CompressedModel& m) { m.dense["blk.0.ffn_up.p3.h"] = random_dense({96}, 1); },
                 {"'blk.0.ffn_up.p3.h'", "BLR matrix 'blk.0.ffn_up'"});
  expect_refused([](CompressedModel& m) { m.config.rms_norm_eps = -1; }, {"config", "rms_norm_eps"});
  expect_refused([](CompressedModel& m) { m.tokenizer->eos_id = 99; }, {"tokenizer", "bos/eos id 99"});
  expect_refused([](CompressedModel& m) { m.tokenizer->tokens[3] = std::string(1, static_cast<char>(0xc3)); },
                 {"UTF-8"});
  expect_refused([](CompressedModel& m) { m.summary = json::array(); }, {"summary", "object"});
  expect_refused([](CompressedModel& m) { m.summary["bad"] = "\xff"; }, {"summary", "JSON"});
  // Q8_0 blocks that do not hold their tensor's values, or name no dense matrix.
  const auto with_q8 = [](CompressedModel& m) {
    auto& table = m.dense.at("token_embd.weight").values;
    table = test::as_ggml_q8_0(table);
    record_exact_q8_0(m);
  };
  expect_refused(
      [&](CompressedModel& m) {
        with_q8(m);
        m.q8_0_blocks.at("token_embd.weight")[3].q[5] ^= 1;
      },
      {"'token_embd.weight'", "index 101", "is not its Q8_0 blocks'"});
  expect_refused(
      [&](CompressedModel& m) {
        with_q8(m);
        m.q8_0_blocks.at("token_embd.weight").pop_back();
      },
      {"'token_embd.weight'", "do not tile it"});
  expect_refused(
      [&](CompressedModel& m) {
        with_q8(m);
        m.q8_0_blocks["nothing.weight"] = m.q8_0_blocks.at("token_embd.weight");
      },
      {"'nothing.weight'", "no dense tensor"});
}

TEST(BitrankFormat, FailedSaveLeavesTheOldFileAndNoPartialOne) {
  const TempDir dir;
  const fs::path file = dir.path() / "model.bitrank";
  CompressedModel small = tiny_model({});
  small.blr.clear();
  save_bitrank(file, small);
  const std::string old = slurp(file);
  const CompressedModel big = tiny_model({.scales = StoredFloat::f32, .dense = StoredFloat::f32});
  ASSERT_GT(bitrank_image(big).size(), 80000u);
  {
    const test::ScopedFileSizeLimit limit(64 * 1024);  // the write fails half-way
    ASSERT_TRUE(limit.ok());
    expect_error_with([&] { save_bitrank(file, big); }, {"model.bitrank", "writing"});
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.bitrank"});
  EXPECT_EQ(slurp(file), old);
  expect_model_eq(load_bitrank(file), small);
  // A target that cannot be replaced (a directory): the temporary file goes too.
  fs::create_directories(dir.path() / "dir.bitrank" / "x");
  expect_error_with([&] { save_bitrank(dir.path() / "dir.bitrank", big); }, {"dir.bitrank", "rename"});
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"dir.bitrank", "model.bitrank"}));
}

}  // namespace
}  // namespace bitrank::store
