// `bitrank compress` end to end on a tiny dense Llama (Hugging Face layout,
// the test BPE tokenizer of tests/data/tokenizer), CPU: plan, Dual-SVID,
// layer-wise training, save, read back, perplexities. The real SmolLM2 run
// with the CLI's defaults is the README's main command; here the whole
// pipeline is checked in a few seconds.
#include "bitrank/train/compress.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "bitrank/io/bitrank_format.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/load.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/train/report.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/model_files.hpp"
#include "support/temp_dir.hpp"

namespace bitrank {
namespace {

// 2 blocks, hidden 64, 4 heads / 2 kv of 16, MLP 96, the test tokenizer's 3001 ids.
constexpr const char* kConfig = R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 3001,
    "rms_norm_eps": 1e-5, "max_position_embeddings": 256, "rope_theta": 10000.0, "tie_word_embeddings": true})";

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// A model directory with random weights (unit-variance projections, gains near 1).
std::filesystem::path tiny_model(const std::filesystem::path& dir) {
  model::HostWeights w;
  w.config = io::parse_hf_config(kConfig, "config.json");
  std::mt19937_64 rng(3);
  for (const auto& [name, shape] : model::expected_tensors(w.config)) {
    model::HostTensor t{shape, {}};
    const bool gain = shape.size() == 1;
    std::uniform_real_distribution<double> u(-1, 1);
    const double scale = gain ? 0.1 : std::sqrt(3.0 / static_cast<double>(shape[1]));
    index_t numel = 1;
    for (index_t s : shape) numel *= s;
    for (index_t i = 0; i < numel; ++i) t.values.push_back(static_cast<float>((gain ? 1.0 : 0.0) + scale * u(rng)));
    w.tensors.emplace(name, std::move(t));
  }
  const auto bytes = test::llama_hf_safetensors(w);
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  write_file(dir / "config.json", kConfig);
  std::filesystem::copy_file(std::filesystem::path(BITRANK_TEST_DATA_DIR) / "tokenizer" / "smollm.json",
                             dir / "tokenizer.json");
  return dir;
}

std::string some_text(int seed, int paragraphs) {
  static const char* words[] = {"the", "module", "function", "returns", "a", "list", "of", "values", "when",
                                "called", "with", "arguments", "Python", "file", "object", "is", "used", "to"};
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::string s;
  for (int p = 0; p < paragraphs; ++p) {
    for (int i = 0; i < 60; ++i) s += std::string(words[rng() % std::size(words)]) + (i % 12 == 11 ? ".\n" : " ");
    s += "\n";
  }
  return s;
}

TEST(Compress, TinyLlamaEndToEnd) {
  test::TempDir tmp;
  train::CompressOptions o;
  o.model = tiny_model(tmp.path());
  o.out = tmp.path() / "tiny.bitrank";
  o.text = tmp.path() / "train.txt";
  o.eval_text = tmp.path() / "eval.txt";
  write_file(o.text, some_text(1, 40));
  write_file(o.eval_text, some_text(2, 10));
  o.bpw = 4.0;  // 64-wide matrices: rank 32 with 2 paths costs 3.25 bpw
  o.paths = 2;
  o.steps = 24;
  o.seq_len = 32;
  o.windows_per_step = 2;
  o.eval_windows = 2;
  o.eval_seq_len = 64;
  o.train.signs.lr = 0.02f;  // enough for flips within 24 steps
  const auto summary = train::compress(o, test::cpu_backend());

  // The file: every projection as BLR at the planned rank, the rest dense, bpw honest.
  const io::CompressedModel cm = io::load_bitrank(o.out);
  EXPECT_EQ(cm.blr.size(), 14u);
  for (const auto& [name, m] : cm.blr) {
    EXPECT_EQ(m.paths.size(), 2u) << name;
    EXPECT_EQ(m.r, summary.at("matrices").at(name).at("rank").get<index_t>()) << name;
  }
  EXPECT_TRUE(cm.tokenizer.has_value());
  const double blr_bpw = summary.at("accounting").at("blr").at("bpw").get<double>();
  EXPECT_LE(blr_bpw, 4.0);
  EXPECT_GT(blr_bpw, 3.0);

  // Perplexities are finite and the student's is what the saved file gives.
  const auto& ppl = summary.at("perplexity");
  for (const char* k : {"teacher", "init", "student"}) EXPECT_TRUE(std::isfinite(ppl.at(k).at("ppl").get<double>())) << k;
  const io::Tokenizer tok(*cm.tokenizer);
  const auto ids = tok.encode(some_text(2, 10));
  // As `bitrank eval --model tiny.bitrank` loads it (and its tokenizer):
  const model::LoadedWeights loaded = model::load_any(o.out);
  EXPECT_EQ(loaded.blr.size(), 14u);
  EXPECT_EQ(io::load_model_tokenizer(o.out).encode(some_text(2, 10)), ids);
  const auto student = model::make_model(test::cpu_backend(), loaded.weights, loaded.blr);
  const auto nll = student->nll(std::span<const std::int32_t>(ids).first(2 * 64), 64);
  EXPECT_NEAR(std::exp(nll.sum / static_cast<double>(nll.count)), ppl.at("student").at("ppl").get<double>(), 1e-9);

  // Training: every step logged, losses finite, each block's loss falls, signs flip.
  const auto log = train::read_step_log(summary.at("log").get<std::string>());
  ASSERT_EQ(log.size(), 2u * 24u);
  for (const auto& r : log) EXPECT_TRUE(std::isfinite(r.loss) && !r.skipped) << r.step;
  for (const auto& b : summary.at("blocks")) {
    const double first = b.at("first_loss").get<double>(), last = b.at("last_loss").get<double>();
    std::printf("  [compress] block %d: loss %.4g -> %.4g, %lld flips\n", b.at("block").get<int>(), first, last,
                b.at("flips").get<long long>());
    EXPECT_LT(last, 0.9 * first);
  }
  EXPECT_GT(summary.at("training").at("sign_flips").get<long long>(), 0);
  EXPECT_TRUE(std::filesystem::exists(summary.at("plot").get<std::string>()));
  std::printf("  [compress] tiny: ppl teacher %.2f, init %.2f, student %.2f; %.0f block-tokens/s\n",
              ppl.at("teacher").at("ppl").get<double>(), ppl.at("init").at("ppl").get<double>(),
              ppl.at("student").at("ppl").get<double>(), summary.at("training").at("tokens_per_s").get<double>());
}

TEST(Compress, BadOptionsAreErrors) {
  test::TempDir tmp;
  train::CompressOptions o;
  o.model = "m.gguf";
  o.out = tmp.path() / "x.bitrank";
  auto with = [&](auto change) {
    train::CompressOptions c = o;
    change(c);
    return c;
  };
  test::expect_error([&] { train::validate(with([](auto& c) { c.paths = 3; })); }, "--paths must be 1 or 2");
  test::expect_error([&] { train::validate(with([](auto& c) { c.bpw = 0; })); }, "--bpw must be in (0, 16]");
  test::expect_error([&] { train::validate(with([](auto& c) { c.steps = 0; })); }, "--steps must be at least 1");
  test::expect_error([&] { train::validate(with([](auto& c) { c.objective = "kd"; })); }, "objective 'kd'");
  test::expect_error([&] { train::validate(with([&](auto& c) { c.out = tmp.path() / "no" / "x.bitrank"; })); },
                     "does not exist");
}

}  // namespace
}  // namespace bitrank
