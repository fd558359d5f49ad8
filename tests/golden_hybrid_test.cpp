// Golden test: the tiny Qwen3.5 and Qwen3-Next checkpoints of
// tests/data/golden/{qwen3_5,qwen3_next} against Hugging Face transformers,
// an independent implementation.
//
// `tools/fixtures/make_golden.py hybrid OUT` (on the GPU machine) built both
// with transformers' own classes — 4 blocks (3 GDN, 1 gated attention), hidden
// 128, attention 2 heads / 1 kv head of 128, GDN 1 k-head / 2 v-heads of
// 128, MLP 192, vocabulary 256, bf16-representable random weights — saved
// them with save_pretrained (the Qwen3-Next one holds the same weights in
// its group-interleaved in_proj_qkvz / in_proj_ba layout) and wrote the f32
// logits of 2 windows of 24 tokens, computed on the CPU with eager attention.
//
// Checked through our Hugging Face loader, on the f64 reference and every
// f32 backend available: relative L2 error of all logits ≤ 1e-4
// (transformers itself runs in f32; measured errors are printed).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "bitrank/model/hybrid.hpp"
#include "support/backends.hpp"
#include "support/host_values.hpp"

namespace bitrank {
namespace {

using test::rel_l2;

constexpr double kTolerance = 1e-4;

struct Golden {
  index_t windows = 0, window = 0;
  std::vector<std::int32_t> tokens;
  std::vector<double> logits;  // [windows·window][V]
};

Golden read_golden(const std::string& dir) {
  std::ifstream in(dir + "/golden.json");
  if (!in) throw std::runtime_error(dir + "/golden.json missing");
  const nlohmann::json j = nlohmann::json::parse(in);
  Golden g;
  g.windows = j.at("windows").get<index_t>();
  g.window = j.at("window").get<index_t>();
  for (const auto& w : j.at("tokens"))
    for (const auto& t : w) g.tokens.push_back(t.get<std::int32_t>());
  for (const auto& w : j.at("logits"))
    for (const auto& row : w)
      for (const auto& v : row) g.logits.push_back(v.get<double>());
  return g;
}

template <class T>
double error_of(Backend<T>& be, const model::HostWeights& w, const Golden& g) {
  const model::HybridModel<T> m(be, w);
  const std::vector<double> z = m.logits(g.tokens, g.window);
  EXPECT_EQ(z.size(), g.logits.size());
  if (z.size() != g.logits.size()) return INFINITY;
  return rel_l2(z, g.logits);
}

void check_model(const std::string& name, io::ModelFamily family) {
  const std::string dir = std::string(BITRANK_TEST_DATA_DIR) + "/golden/" + name;
  const Golden g = read_golden(dir);
  const model::HostWeights w = model::load_hybrid_hf_weights(dir);
  ASSERT_EQ(w.config.family, family);
  ASSERT_EQ(w.config.num_layers, 4);
  ASSERT_EQ(static_cast<index_t>(g.tokens.size()), g.windows * g.window);
  ASSERT_EQ(static_cast<index_t>(g.logits.size()), g.windows * g.window * w.config.vocab_size);

  const double ref = error_of(test::ref_backend(), w, g);
  std::printf("  [golden] %s ref (f64): logits rel %.2e (tol %.0e)\n", name.c_str(), ref, kTolerance);
  EXPECT_LE(ref, kTolerance);
  for (const std::string& be_name : test::available_backends()) {
    const double err = error_of(test::backend(be_name), w, g);
    std::printf("  [golden] %s %s: logits rel %.2e (tol %.0e)\n", name.c_str(), be_name.c_str(), err, kTolerance);
    EXPECT_LE(err, kTolerance) << be_name;
  }
}

TEST(Golden, Qwen35LogitsMatchTransformers) { check_model("qwen3_5", io::ModelFamily::qwen3_5); }

TEST(Golden, Qwen3NextLogitsMatchTransformers) { check_model("qwen3_next", io::ModelFamily::qwen3_next); }

}  // namespace
}  // namespace bitrank
