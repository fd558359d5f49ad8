// `bitrank compress` end to end on a tiny dense Llama and a tiny Qwen3.5
// hybrid (Hugging Face layout, the test BPE tokenizer of tests/data/tokenizer),
// CPU: plan, Dual-SVID, layer-wise training, save, read back, perplexities. The real SmolLM2 run
// with the CLI's defaults is the README's main command; here the whole
// pipeline is checked in a few seconds.
//
// Checkpoints and resume (DESIGN §7, §10 "NaN injection skips a step; kill
// and resume"): a run stopped after any step (by a test hook, or the CLI
// killed with SIGKILL) and resumed gives the uninterrupted run's step log
// (every loss bit for bit), student states and saved tensors; a resume with
// other options, data or objective is an Error naming the difference; a NaN
// poked into one gradient skips that step only — for the layer-wise and the
// end-to-end objective.
#include "bitrank/model/make.hpp"
#include "bitrank/train/compress.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <fmt/format.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <functional>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <tuple>

#include "bitrank/io/hf_config.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/io/safetensors_writer.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/model/projection.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "bitrank/store/load.hpp"
#include "bitrank/train/calibration.hpp"
#include "bitrank/train/compress_checkpoint.hpp"
#include "bitrank/train/data.hpp"
#include "bitrank/train/report.hpp"
#include "support/backends.hpp"
#include "support/command.hpp"
#include "support/expect.hpp"
#include "support/hybrid_fixtures.hpp"
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
std::filesystem::path tiny_model(const std::filesystem::path& dir) { return test::random_llama_dir(dir, kConfig, 3); }

// A job on the tiny model in `dir` writing dir/<out>: word texts, 4.0 bpw
// (64-wide matrices: rank 32 with 2 paths costs 3.25 bpw), 2 windows of 32
// a step, 2 evaluation windows of 64, sign rate 0.02 (flips within tens of
// steps); e2e with a scale rate of 1e-2.
train::CompressOptions tiny_options(const std::filesystem::path& dir, const std::string& out,
                                    const std::string& objective = "layer", std::int64_t steps = 24) {
  train::CompressOptions o;
  o.objective = objective;
  o.steps = steps;
  if (objective == "e2e") o.train.scales.lr = 1e-2f;
  o.model = tiny_model(dir);
  o.out = dir / out;
  o.texts = {dir / "train.txt"};
  o.eval_text = dir / "eval.txt";
  write_file(o.texts.front(), test::word_text(1, 40));
  write_file(o.eval_text, test::word_text(2, 10));
  o.bpw = 4.0;
  o.paths = 2;
  o.seq_len = 32;
  o.windows_per_step = 2;
  o.eval_windows = 2;
  o.eval_seq_len = 64;
  o.train.signs.lr = 0.02f;
  return o;
}

TEST(Compress, TinyLlamaEndToEnd) {
  test::TempDir tmp;
  const train::CompressOptions o = tiny_options(tmp.path(), "tiny.bitrank");
  const auto summary = train::compress(o, test::cpu_backend());

  // The file: every projection as BLR at the planned rank, the rest dense, bpw honest.
  const store::CompressedModel cm = store::load_bitrank(o.out);
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
  const auto ids = tok.encode(test::word_text(2, 10));
  // As `bitrank eval --model tiny.bitrank` loads it (and its tokenizer):
  const store::LoadedWeights loaded = store::load_any(o.out);
  EXPECT_EQ(loaded.blr.size(), 14u);
  EXPECT_EQ(io::load_model_tokenizer(o.out).encode(test::word_text(2, 10)), ids);
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
  EXPECT_FALSE(summary.at("hardware").get<std::string>().empty());  // which CPU or GPU made the figure
  std::printf("  [compress] tiny: ppl teacher %.2f, init %.2f, student %.2f; %.0f block-tokens/s\n",
              ppl.at("teacher").at("ppl").get<double>(), ppl.at("init").at("ppl").get<double>(),
              ppl.at("student").at("ppl").get<double>(), summary.at("training").at("tokens_per_s").get<double>());
}

// A Qwen3.5 hybrid (tests/support/hybrid_fixtures: GDN, GDN, GDN, gated
// attention) as a Hugging Face directory, its vocabulary widened to the test
// tokenizer's 3001 ids.
std::filesystem::path tiny_hybrid_model(const std::filesystem::path& dir) {
  namespace th = test::tiny_hybrid;
  model::HostWeights w = th::tiny_weights(true, 21);
  w.config.vocab_size = 3001;
  std::mt19937_64 rng(22);
  std::uniform_real_distribution<float> u(-1, 1);
  model::HostTensor& embd = w.tensors.at("token_embd.weight");
  embd.shape = {3001, th::kD};
  embd.values.resize(static_cast<std::size_t>(3001 * th::kD));
  for (float& v : embd.values) v = 0.05f * u(rng);  // logits of a few tenths: a perplexity near the vocabulary
  const auto bytes = test::safetensors_image(th::hf_tensors(w, false, "model.language_model."));
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  write_file(dir / "config.json", io::hf_config_to_json(w.config, "tiny hybrid"));
  std::filesystem::copy_file(std::filesystem::path(BITRANK_TEST_DATA_DIR) / "tokenizer" / "smollm.json",
                             dir / "tokenizer.json");
  return dir;
}

train::CompressOptions tiny_hybrid_options(const std::filesystem::path& dir) {
  train::CompressOptions o;
  o.model = tiny_hybrid_model(dir);
  o.out = dir / "hybrid.bitrank";
  o.texts = {dir / "train.txt"};
  o.eval_text = dir / "eval.txt";
  write_file(o.texts.front(), test::word_text(1, 20));
  write_file(o.eval_text, test::word_text(2, 10));
  o.bpw = 4.0;
  o.steps = 6;
  o.seq_len = 32;
  o.windows_per_step = 2;
  o.eval_windows = 2;
  o.eval_seq_len = 64;
  o.train.signs.lr = 0.02f;
  return o;
}

// The layer-wise objective on a hybrid: every compressible projection (GDN
// qkv, z, out; attention q, k, v, o; MLPs) becomes BLR, the GDN's b and a
// stay dense, and the file runs as the hybrid model with the summary's ppl.
TEST(Compress, TinyHybridEndToEnd) {
  test::TempDir tmp;
  // On every f32 backend present (cuda on the GPU machine): the whole pipeline there.
  for (const std::string& be_name : test::available_backends()) {
    Backend<float>& be = test::backend(be_name);
    std::filesystem::create_directories(tmp.path() / be_name);
    train::CompressOptions o = tiny_hybrid_options(tmp.path() / be_name);
#ifdef BITRANK_HAS_CUDA
    if (be_name == "cuda") o.svd_engine = make_cuda_svd_engine(0);  // as `compress --device cuda`
#endif
    const auto summary = train::compress(o, be);
    ASSERT_TRUE(std::filesystem::exists(o.out));
    EXPECT_EQ(summary.at("init_svd").get<std::string>(), be_name == "cuda" ? "gpu" : "cpu");

    const store::LoadedWeights loaded = store::load_any(o.out);
    EXPECT_TRUE(loaded.weights.config.is_hybrid());
    const auto plan = model::compressible_projections(loaded.weights.config);
    ASSERT_EQ(plan.size(), 3u * 6u + 7u);  // 3 GDN blocks of 6, one attention block of 7
    EXPECT_EQ(loaded.blr.size(), plan.size());
    for (const auto& p : plan) {
      ASSERT_TRUE(loaded.blr.contains(p.name)) << p.name;
      EXPECT_EQ(loaded.blr.at(p.name).r, summary.at("matrices").at(p.name).at("rank").get<index_t>()) << p.name;
      EXPECT_FALSE(loaded.weights.tensors.contains(p.name + ".weight")) << p.name;
    }
    EXPECT_TRUE(loaded.weights.tensors.contains("blk.0.ssm_beta.weight"));
    EXPECT_TRUE(loaded.weights.tensors.contains("blk.0.ssm_alpha.weight"));

    const auto& ppl = summary.at("perplexity");
    for (const char* k : {"teacher", "init", "student"}) EXPECT_TRUE(std::isfinite(ppl.at(k).at("ppl").get<double>())) << k;
    const auto ids = io::load_model_tokenizer(o.out).encode(test::word_text(2, 10));
    const auto student = model::make_model(be, loaded.weights, loaded.blr);
    const auto nll = student->nll(std::span<const std::int32_t>(ids).first(2 * 64), 64);
    const double student_ppl = std::exp(nll.sum / static_cast<double>(nll.count));
    EXPECT_TRUE(std::isfinite(student_ppl));
    EXPECT_NEAR(student_ppl, ppl.at("student").at("ppl").get<double>(), 1e-9);

    const auto log = train::read_step_log(summary.at("log").get<std::string>());
    ASSERT_EQ(log.size(), 4u * 6u);
    for (std::size_t i = 0; i < log.size(); ++i) {
      EXPECT_EQ(log[i].step, static_cast<std::int64_t>(i));
      EXPECT_TRUE(std::isfinite(log[i].loss) && !log[i].skipped) << log[i].step;
    }
    std::printf("  [compress] tiny hybrid on %s: ppl teacher %.2f, init %.2f, student %.2f\n", be_name.c_str(),
                ppl.at("teacher").at("ppl").get<double>(), ppl.at("init").at("ppl").get<double>(), student_ppl);
  }
}

// The end-to-end objective on a hybrid, on every f32 backend present: every
// block at once (GDN and gated attention), the loss (KL + λ·MSE) falls, the
// file holds every compressible projection as BLR and the trained final
// gain, and runs as the hybrid model with the summary's perplexity.
TEST(Compress, TinyHybridEndToEndObjective) {
  test::TempDir tmp;
  for (const std::string& be_name : test::available_backends()) {
    Backend<float>& be = test::backend(be_name);
    std::filesystem::create_directories(tmp.path() / be_name);
    train::CompressOptions o = tiny_hybrid_options(tmp.path() / be_name);
    o.objective = "e2e";
    o.steps = 60;
    o.train.scales.lr = 1e-2f;  // the CLI's e2e default
    const auto summary = train::compress(o, be);
    const auto log = train::read_step_log(summary.at("log").get<std::string>());
    ASSERT_EQ(log.size(), 60u);
    for (const auto& r : log) EXPECT_TRUE(std::isfinite(r.loss) && !r.skipped) << r.step;
    // Each step sees new windows, whose losses differ by ±5%: compare the
    // means of the first and last five steps (measured on the cpu: 81.0 →
    // 66.3; after 30 steps only 80.4 → 71.2).
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) first += log[static_cast<std::size_t>(i)].loss / 5, last += log[log.size() - 1 - i].loss / 5;
    const auto& ppl = summary.at("perplexity");
    std::printf("  [compress] tiny hybrid e2e on %s: loss %.4g -> %.4g, %lld flips; ppl teacher %.2f, init %.2f, "
                "student %.2f\n",
                be_name.c_str(), first, last, summary.at("training").at("sign_flips").get<long long>(),
                ppl.at("teacher").at("ppl").get<double>(), ppl.at("init").at("ppl").get<double>(),
                ppl.at("student").at("ppl").get<double>());
    EXPECT_LT(last, 0.9 * first) << be_name;

    const store::LoadedWeights loaded = store::load_any(o.out);
    const auto plan = model::compressible_projections(loaded.weights.config);
    EXPECT_EQ(loaded.blr.size(), plan.size());
    const store::CompressedModel cm = store::load_bitrank(o.out);
    ASSERT_TRUE(cm.dense.contains("output_norm.weight"));
    const model::HostWeights teacher = store::load_weights(o.model);
    EXPECT_NE(cm.dense.at("output_norm.weight").values, teacher.at("output_norm.weight").values)
        << "the final gain is trained";
    const auto ids = io::load_model_tokenizer(o.out).encode(test::word_text(2, 10));
    const auto student = model::make_model(be, loaded.weights, loaded.blr);
    const auto nll = student->nll(std::span<const std::int32_t>(ids).first(2 * 64), 64);
    EXPECT_NEAR(std::exp(nll.sum / static_cast<double>(nll.count)), ppl.at("student").at("ppl").get<double>(), 1e-9);
  }
}

// The end-to-end objective through the same pipeline: every block at once,
// the loss (KL + λ·MSE) falls, the final norm gain is trained and saved.
TEST(Compress, TinyLlamaEndToEndObjective) {
  test::TempDir tmp;
  const train::CompressOptions o = tiny_options(tmp.path(), "tiny_e2e.bitrank", "e2e", 30);
  const auto summary = train::compress(o, test::cpu_backend());
  const auto log = train::read_step_log(summary.at("log").get<std::string>());
  ASSERT_EQ(log.size(), 30u);
  for (const auto& r : log) EXPECT_TRUE(std::isfinite(r.loss)) << r.step;
  // Each step sees new windows: compare the means of the first and last five steps.
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += log[static_cast<std::size_t>(i)].loss / 5, last += log[log.size() - 1 - i].loss / 5;
  std::printf("  [compress] tiny e2e: loss %.4g -> %.4g; ppl teacher %.2f, init %.2f, student %.2f\n", first, last,
              summary.at("perplexity").at("teacher").at("ppl").get<double>(),
              summary.at("perplexity").at("init").at("ppl").get<double>(),
              summary.at("perplexity").at("student").at("ppl").get<double>());
  EXPECT_LT(last, 0.9 * first);
  const store::CompressedModel cm = store::load_bitrank(o.out);
  EXPECT_EQ(cm.blr.size(), 14u);
  EXPECT_TRUE(cm.dense.contains("output_norm.weight"));
}

// `a` continued with --init a.out: `objective`, `steps` steps, into `out`.
train::CompressOptions continued(const train::CompressOptions& a, const std::string& objective, std::int64_t steps,
                                 const std::filesystem::path& out) {
  train::CompressOptions b = a;
  b.objective = objective;
  b.steps = steps;
  b.init = a.out;
  b.out = out;
  return b;
}

// Runs `b` (a continuation of the run that returned `sa`) and checks that it
// starts where that run ended: its initial perplexity is the trained one of
// `sa` within rel_tol (b's embeddings are the teacher's f32 ones, the file
// holds f16), while `sa`'s own start lies farther than guard·ppl from it
// (so the check tells the starts apart). Returns b's summary.
nlohmann::ordered_json expect_continues(const nlohmann::ordered_json& sa, const train::CompressOptions& b,
                                        double rel_tol, double guard, const char* what) {
  const auto sb = train::compress(b, test::cpu_backend());
  const double a_init = sa.at("perplexity").at("init").at("ppl").get<double>();
  const double a_student = sa.at("perplexity").at("student").at("ppl").get<double>();
  const double b_init = sb.at("perplexity").at("init").at("ppl").get<double>();
  std::printf("  [compress] --init, %s: ppl %.3f → %.3f, the continuation starts at %.3f\n", what, a_init, a_student,
              b_init);
  EXPECT_NEAR(b_init, a_student, rel_tol * a_student) << what;
  EXPECT_GT(std::abs(a_init - a_student), guard * a_student) << what;
  return sb;
}

// --init: a run starts from a compressed model instead of Dual-SVID. Here a
// layer-wise run continues an e2e one: its ranks are the file's, its
// starting perplexity the file's model's (up to the f16 rounding of the
// file's embeddings, which the run takes from the teacher), and the final
// norm the e2e run trained (which layer-wise does not train) is saved as is.
TEST(Compress, InitFromACompressedModel) {
  test::TempDir tmp;
  const train::CompressOptions a = tiny_options(tmp.path(), "a.bitrank", "e2e", 12);
  const auto sa = train::compress(a, test::cpu_backend());

  const train::CompressOptions b = continued(a, "layer", 6, tmp.path() / "b.bitrank");
  const auto sb = expect_continues(sa, b, 2e-3, 0.05, "e2e run, then layer-wise from it");
  EXPECT_EQ(sb.at("options").at("init").get<std::string>(), std::filesystem::absolute(a.out).lexically_normal().string());
  EXPECT_EQ(sb.at("init_method"), "file");
  for (const auto& [name, m] : sa.at("matrices").items())
    EXPECT_EQ(sb.at("matrices").at(name).at("rank"), m.at("rank")) << name;
  const store::CompressedModel ma = store::load_bitrank(a.out), mb = store::load_bitrank(b.out);
  EXPECT_EQ(mb.dense.at("output_norm.weight").values, ma.dense.at("output_norm.weight").values);
  EXPECT_NE(mb.dense.at("blk.0.attn_norm.weight").values, ma.dense.at("blk.0.attn_norm.weight").values);  // trained on

  // What --init refuses: a file of another model, another path count, the output itself.
  train::CompressOptions bad = b;
  bad.out = tmp.path() / "c.bitrank";
  bad.paths = 1;
  test::expect_error([&] { train::compress(bad, test::cpu_backend()); }, "has 2 path(s), this run trains 1");
  bad = b;
  bad.out = a.out;
  test::expect_error([&] { train::compress(bad, test::cpu_backend()); }, "--init and -o name the same file");
  bad = b;
  bad.out = tmp.path() / "c.bitrank";
  std::string wider = kConfig;
  wider.replace(wider.find("\"hidden_size\": 64"), 17, "\"hidden_size\": 32");
  std::filesystem::create_directories(tmp.path() / "wider");
  bad.model = test::random_llama_dir(tmp.path() / "wider", wider, 3);
  test::expect_error([&] { train::compress(bad, test::cpu_backend()); }, "compress --init:");
  bad = b;
  bad.init = tmp.path() / "missing.bitrank";
  test::expect_error([&] { train::compress(bad, test::cpu_backend()); }, "the --init file");
  // On the command line the file's ranks exclude a target.
  const auto [status, out] = test::run_command("'" BITRANK_CLI "' compress --model '" + a.model.string() + "' --init '" +
                                               a.out.string() + "' --bpw 2 -o '" + (tmp.path() / "d.bitrank").string() +
                                               "' 2>&1");
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("brings its own ranks; --bpw and --bpw-for do not apply"), std::string::npos) << out;
}

// --init on a hybrid: the e2e objective continues a layer-wise run and
// starts from its model (every block's trained gains, q/k norms included).
TEST(Compress, HybridInitFromALayerwiseRun) {
  test::TempDir tmp;
  train::CompressOptions a = tiny_hybrid_options(tmp.path());
  a.train.scales.lr = 1e-2f;
  const auto sa = train::compress(a, test::cpu_backend());
  expect_continues(sa, continued(a, "e2e", 2, tmp.path() / "hybrid_e2e.bitrank"), 1e-3, 5e-3,
                   "hybrid layer-wise run, then e2e from it");
}

// --bpw-for: the overridden projections get their own target's rank; the
// others the global one; a pattern that matches nothing is an Error.
TEST(Compress, PerProjectionTargets) {
  test::TempDir tmp;
  train::CompressOptions o;
  o.model = tiny_model(tmp.path());
  o.out = tmp.path() / "tiny.bitrank";
  o.texts = {tmp.path() / "train.txt"};
  o.eval_text = tmp.path() / "eval.txt";
  write_file(o.texts.front(), test::word_text(1, 20));
  write_file(o.eval_text, test::word_text(2, 4));
  o.bpw = 4.0;  // 64-wide matrices: rank 32 (3.25 bpw with 2 paths); rank 64, their cap, 5.5
  o.bpw_overrides = {{"attn_q", 5.5}};
  o.steps = 2;
  o.seq_len = 32;
  o.windows_per_step = 1;
  o.eval_windows = 1;
  o.eval_seq_len = 64;
  const auto summary = train::compress(o, test::cpu_backend());
  // Each group meets its own whole budget (plan_ranks hands leftover bits back within a group).
  double q_bits = 0, q_weights = 0, rest_bits = 0, rest_weights = 0;
  for (const auto& [name, mat] : summary.at("accounting").at("matrices").items()) {
    const double bits = mat.at("bits").get<double>(), weights = mat.at("m").get<double>() * mat.at("n").get<double>();
    const bool q = name.find("attn_q") != std::string::npos;
    (q ? q_bits : rest_bits) += bits;
    (q ? q_weights : rest_weights) += weights;
    if (q) {
      EXPECT_GE(mat.at("rank").get<index_t>(), 64) << name;  // 32 is all 4.0 bpw affords a 64-wide matrix
    }
  }
  ASSERT_GT(q_weights, 0);
  ASSERT_GT(rest_weights, 0);
  EXPECT_LE(q_bits / q_weights, 5.5);
  EXPECT_GT(q_bits / q_weights, 4.0);
  EXPECT_LE(rest_bits / rest_weights, 4.0);
  EXPECT_EQ(summary.at("options").at("bpw_overrides").at(0).at("pattern").get<std::string>(), "attn_q");
  EXPECT_GE(store::load_bitrank(o.out).blr.at("blk.1.attn_q").r, 64);

  o.out = tmp.path() / "other.bitrank";
  o.bpw_overrides = {{"attn_x", 7.0}};
  test::expect_error([&] { train::compress(o, test::cpu_backend()); }, "no projection's name contains 'attn_x'");
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
  test::expect_error([&] { train::validate(with([](auto& c) { c.checkpoint_every = -1; })); },
                     "--checkpoint-every must be 0");
  test::expect_error([&] { train::validate(with([](auto& c) { c.init_rotate = -1; })); },
                     "--init-rotate -1 is not a number of rotation rounds");
  test::expect_error([&] { train::validate(with([](auto& c) {
                       c.init_rotate = 4;
                       c.init = "start.bitrank";
                     })); },
                     "--init-rotate rotates the Dual-SVID start");
  test::expect_error([&] { train::validate(with([&](auto& c) { c.out = tmp.path() / "no" / "x.bitrank"; })); },
                     "does not exist");
}

// ---- checkpoints and resume ------------------------------------------------

namespace fs = std::filesystem;

// Thrown by a test hook: the run stops there as if killed.
struct Stop {};

// The tiny job of the resume tests: 2 blocks of 12 steps of 2 windows of 32,
// a checkpoint every 5 steps (steps 5 and 10 of block 0, then the block end,
// then steps 3 and 8 of block 1 — global steps 15 and 20).
train::CompressOptions resume_job(const fs::path& dir) {
  train::CompressOptions o;
  o.model = dir / "model";
  if (!fs::exists(o.model)) {
    fs::create_directories(o.model);  // and dir
    tiny_model(o.model);
    write_file(dir / "train.txt", test::word_text(1, 40));
    write_file(dir / "eval.txt", test::word_text(2, 4));
  }
  o.texts = {dir / "train.txt"};
  o.eval_text = dir / "eval.txt";
  o.out = dir / "a.bitrank";
  o.bpw = 4.0;
  o.steps = 12;
  o.seq_len = 32;
  o.windows_per_step = 2;
  o.eval_windows = 1;
  o.eval_seq_len = 64;
  o.train.signs.lr = 0.02f;  // flips within a few steps, so the sign state matters
  o.checkpoint_every = 5;
  return o;
}

std::vector<train::StepRecord> step_log(const fs::path& out) { return train::read_step_log(out.string() + ".steps.jsonl"); }

// The checkpoint written after step k, the one whose gradient was poisoned:
// step k + 1 next, k applied steps, one skip on the scaler and in the log.
void expect_checkpoint_after_skip(const fs::path& out, std::int64_t k) {
  const train::CompressCheckpoint ck = train::read_compress_checkpoint(train::compress_checkpoint_path(out));
  EXPECT_EQ(ck.trainer.step, k + 1);
  EXPECT_EQ(ck.trainer.applied_steps, k) << "the skipped step is not counted for Adam's t";
  EXPECT_EQ(ck.trainer.scaler.skipped_total, 1);
  EXPECT_EQ(ck.trainer.scaler.consecutive_skips, 1);
  EXPECT_EQ(ck.blocks.at(0).skipped, 1);
}

// The poisoned run `b` against the clean run `a` (step logs; student-state
// fingerprints after each step): equal through step k, the state unchanged by
// step k, only step k skipped, the scale halved after it, and the runs apart
// from then on.
void expect_only_step_skipped(const std::vector<train::StepRecord>& a, const std::vector<train::StepRecord>& b,
                              const std::map<std::int64_t, std::uint64_t>& states_clean,
                              const std::map<std::int64_t, std::uint64_t>& states, std::int64_t k) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(b.size(), static_cast<std::size_t>(k + 1));
  ASSERT_GE(k, 2);
  for (std::int64_t s = 0; s <= k; ++s) {
    EXPECT_EQ(std::bit_cast<std::uint64_t>(a[s].loss), std::bit_cast<std::uint64_t>(b[s].loss)) << "step " << s;
    EXPECT_EQ(a[s].scale, b[s].scale) << "step " << s;
  }
  for (std::int64_t s = 0; s < k; ++s) EXPECT_EQ(states_clean.at(s), states.at(s)) << "step " << s;
  EXPECT_EQ(states.at(k), states.at(k - 1)) << "the state after the skipped step is the one before it";
  EXPECT_NE(states.at(k - 1), states.at(k - 2)) << "a clean step changes the state";
  for (const auto& r : b) EXPECT_EQ(r.skipped, r.step == k) << r.step;
  EXPECT_EQ(b[k].flips, 0);
  EXPECT_EQ(b[k + 1].scale, b[k].scale / 2) << "the skip halves the grad scale";
  EXPECT_NE(a[k + 1].loss, b[k + 1].loss) << "step k's update is missing from the poisoned run";
  for (std::size_t s = k + 1; s < b.size(); ++s) EXPECT_TRUE(std::isfinite(b[s].loss)) << s;
}

// Same records, every field but the wall time; doubles compared by their bits.
void expect_same_steps(const std::vector<train::StepRecord>& a, const std::vector<train::StepRecord>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i].step) << i;
    EXPECT_EQ(std::bit_cast<std::uint64_t>(a[i].loss), std::bit_cast<std::uint64_t>(b[i].loss)) << "step " << i;
    EXPECT_EQ(std::bit_cast<std::uint64_t>(a[i].lr), std::bit_cast<std::uint64_t>(b[i].lr)) << "step " << i;
    EXPECT_EQ(a[i].scale, b[i].scale) << "step " << i;
    EXPECT_EQ(a[i].flips, b[i].flips) << "step " << i;
    EXPECT_EQ(a[i].skipped, b[i].skipped) << "step " << i;
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "step " << i;
  }
}

// The two model files hold the same tensors, value for value.
void expect_same_tensors(const fs::path& a, const fs::path& b) {
  const store::CompressedModel ma = store::load_bitrank(a), mb = store::load_bitrank(b);
  ASSERT_EQ(ma.blr.size(), mb.blr.size());
  for (const auto& [name, w] : ma.blr) {
    ASSERT_TRUE(mb.blr.contains(name)) << name;
    const blr::HostBlrMatrix& v = mb.blr.at(name);
    ASSERT_EQ(w.paths.size(), v.paths.size()) << name;
    EXPECT_EQ(w.r, v.r) << name;
    for (std::size_t p = 0; p < w.paths.size(); ++p) {
      EXPECT_EQ(w.paths[p].sign_u, v.paths[p].sign_u) << name << " path " << p;
      EXPECT_EQ(w.paths[p].sign_v, v.paths[p].sign_v) << name << " path " << p;
      EXPECT_EQ(w.paths[p].h, v.paths[p].h) << name << " path " << p;
      EXPECT_EQ(w.paths[p].l, v.paths[p].l) << name << " path " << p;
      EXPECT_EQ(w.paths[p].g, v.paths[p].g) << name << " path " << p;
    }
  }
  ASSERT_EQ(ma.dense.size(), mb.dense.size());
  for (const auto& [name, t] : ma.dense) {
    ASSERT_TRUE(mb.dense.contains(name)) << name;
    EXPECT_EQ(t.values, mb.dense.at(name).values) << name;
  }
}

// The halved scale and the skip count survive a resume: the poisoned run `c`
// (its hooks poison the same step as the run that logged `b` into `want`),
// stopped after step 7 — a checkpoint after 5 steps — and resumed, logs
// the same steps and writes the same tensors.
void expect_poisoned_run_resumes_the_same(train::CompressOptions c, Backend<float>& be,
                                          const std::vector<train::StepRecord>& b, const fs::path& want,
                                          std::int64_t stop_after = 7, std::int64_t resumed_at = 5) {
  c.hooks.on_step = [stop_after](const train::StepRecord& r) {
    if (r.step == stop_after) throw Stop{};
  };
  EXPECT_THROW(train::compress(c, be), Stop);
  c.hooks.on_step = {};
  c.resume = true;
  const auto summary = train::compress(c, be);
  EXPECT_EQ(summary.at("resumed_at_step").get<std::int64_t>(), resumed_at);
  EXPECT_EQ(summary.at("training").at("skipped_steps").get<std::int64_t>(), 1);
  expect_same_steps(b, step_log(c.out));
  expect_same_tensors(want, c.out);
}

std::uint64_t state_fingerprint(const train::StudentLlamaBlock<float>& block) {
  const auto bytes = block.download_state();
  return train::fnv1a64(bytes);
}

// Records the student's state after every step (a later run of a step overwrites an earlier one).
void record_states(train::CompressOptions& o, std::map<std::int64_t, std::uint64_t>& states) {
  o.hooks.after_step = [&states](const train::StudentLlamaBlock<float>& block, const train::StepRecord& r) {
    states[r.step] = state_fingerprint(block);
  };
}

void stopped_anywhere_resumes_bit_identically(Backend<float>& be, const fs::path& dir,
                                              const std::string& objective = "layer") {
  std::map<std::int64_t, std::uint64_t> states_a, states_b;
  train::CompressOptions a = resume_job(dir);
  a.objective = objective;
  record_states(a, states_a);
  const auto summary_a = train::compress(a, be);
  EXPECT_FALSE(fs::exists(train::compress_checkpoint_path(a.out))) << "the checkpoint is deleted after the save";
  ASSERT_EQ(states_a.size(), 24u);

  // B: stopped after global steps 7, 11 and 17, resumed each time. The last
  // checkpoints before those: block 0 at step 5 (mid-block, no teacher block
  // replayed), block 1 at step 0 (the end of block 0), block 1 at step 3
  // (mid-block after the teacher's block 0 is replayed); the step log keeps
  // the records before the checkpoint and drops those after it.
  train::CompressOptions b = resume_job(dir);
  b.objective = objective;
  b.out = dir / "b.bitrank";
  const struct {
    std::int64_t stop_after, block, step;
  } stops[] = {{7, 0, 5}, {11, 1, 0}, {17, 1, 3}};
  for (const auto& stop : stops) {
    record_states(b, states_b);
    const auto record = b.hooks.after_step;
    b.hooks.after_step = [&](const train::StudentLlamaBlock<float>& block, const train::StepRecord& r) {
      record(block, r);
      if (r.step == stop.stop_after) throw Stop{};
    };
    EXPECT_THROW(train::compress(b, be), Stop) << "stop after " << stop.stop_after;
    const train::CompressCheckpoint ck = train::read_compress_checkpoint(train::compress_checkpoint_path(b.out));
    EXPECT_EQ(ck.block, stop.block);
    EXPECT_EQ(ck.trainer.step, stop.step);
    EXPECT_EQ(ck.student_state.empty(), stop.step == 0);
    EXPECT_EQ(ck.trained.size(), 7u * static_cast<std::size_t>(stop.block));
    EXPECT_EQ(step_log(b.out).size(), static_cast<std::size_t>(stop.stop_after + 1));
    b.resume = true;
  }
  record_states(b, states_b);
  const auto summary_b = train::compress(b, be);
  EXPECT_FALSE(fs::exists(train::compress_checkpoint_path(b.out)));
  EXPECT_EQ(summary_b.at("resumed_at_step").get<std::int64_t>(), 15);

  expect_same_steps(step_log(a.out), step_log(b.out));
  EXPECT_EQ(states_a, states_b) << "the student's state after every step";
  expect_same_tensors(a.out, b.out);
  EXPECT_EQ(summary_a.at("blocks"), summary_b.at("blocks"));
  EXPECT_EQ(summary_a.at("training").at("sign_flips"), summary_b.at("training").at("sign_flips"));
  EXPECT_GT(summary_a.at("training").at("sign_flips").get<std::int64_t>(), 0) << "signs must move for the test to bite";
  for (const char* k : {"ppl", "nll"})
    EXPECT_EQ(summary_a.at("perplexity").at("student").at(k), summary_b.at("perplexity").at("student").at(k)) << k;
}

TEST(CompressResume, ResumeWithOtherOptionsOrDataIsAnError) {
  test::TempDir tmp;
  Backend<float>& be = test::cpu_backend();
  train::CompressOptions o = resume_job(tmp.path());
  {
    // --resume before the first checkpoint (a kill during the initialisation): the run starts afresh;
    // once it is complete, --resume has nothing to continue and says so.
    train::CompressOptions r = o;
    r.resume = true;
    r.out = tmp.path() / "fresh.bitrank";
    const auto fresh = train::compress(r, be);
    EXPECT_FALSE(fresh.contains("resumed_at_step"));
    test::expect_error([&] { train::compress(r, be); }, "nothing to resume");
  }
  o.hooks.after_step = [](const train::StudentLlamaBlock<float>&, const train::StepRecord& r) {
    if (r.step == 7) throw Stop{};
  };
  EXPECT_THROW(train::compress(o, be), Stop);
  o.hooks = {};
  const fs::path ckpt = train::compress_checkpoint_path(o.out);
  ASSERT_TRUE(fs::exists(ckpt));

  // A fresh run does not overwrite the checkpoint of an interrupted one.
  test::expect_error([&] { train::compress(o, be); }, "pass --resume");
  o.resume = true;
  auto changed = [&](auto change) {
    train::CompressOptions c = o;
    change(c);
    return c;
  };
  test::expect_error([&] { train::compress(changed([](auto& c) { c.seq_len = 16; }), be); },
                     "was written with seq_len = 32, this run has seq_len = 16");
  test::expect_error([&] { train::compress(changed([](auto& c) { c.train.signs.lr = 0.01f; }), be); },
                     "train.signs.lr");
  test::expect_error([&] { train::compress(changed([](auto& c) { c.bpw = 3.5; }), be); }, "bpw");
  test::expect_error([&] { train::compress(changed([](auto& c) { c.seed = 9; }), be); }, "seed");
  // Same file name, other text: the ids' fingerprint differs.
  const std::string text = test::word_text(1, 40);
  write_file(o.texts.front(), test::word_text(5, 40));
  test::expect_error([&] { train::compress(o, be); }, "training data differs");
  write_file(o.texts.front(), text);

  // A truncated checkpoint is an Error naming the file; the intact one resumes.
  const fs::path copy = tmp.path() / "copy.ckpt";
  fs::copy_file(ckpt, copy);
  fs::resize_file(copy, fs::file_size(copy) - 100);
  test::expect_error([&] { train::read_compress_checkpoint(copy); }, copy.string());
  const auto summary = train::compress(o, be);
  EXPECT_EQ(summary.at("resumed_at_step").get<std::int64_t>(), 5);
  EXPECT_EQ(step_log(o.out).size(), 24u);
}

void nan_gradient_skips_that_step_only(Backend<float>& be, const fs::path& dir) {
  std::map<std::int64_t, std::uint64_t> states_clean, states;
  train::CompressOptions clean = resume_job(dir);
  clean.out = dir / "clean.bitrank";
  record_states(clean, states_clean);
  train::compress(clean, be);

  // Poison one BLR scale gradient of attn_q at step k; checkpoint after every step.
  constexpr std::int64_t k = 4;
  train::CompressOptions o = resume_job(dir);
  o.checkpoint_every = 1;
  record_states(o, states);
  const auto record = o.hooks.after_step;
  std::vector<std::byte> before;
  bool checked = false;
  o.hooks.after_backward = [&](train::StudentLlamaBlock<float>& block, std::int64_t step) {
    if (step != k) return;
    before = block.download_state();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    be.memory->upload(block.proj(model::LlamaProj::q).scale_grads().data + 3, &nan, sizeof nan);
  };
  o.hooks.after_step = [&](const train::StudentLlamaBlock<float>& block, const train::StepRecord& r) {
    record(block, r);
    if (r.step != k) return;
    EXPECT_TRUE(block.download_state() == before) << "the skipped step changed the student's state";
    expect_checkpoint_after_skip(o.out, k);
    checked = true;
  };
  const auto summary = train::compress(o, be);
  EXPECT_TRUE(checked);
  EXPECT_EQ(summary.at("training").at("skipped_steps").get<std::int64_t>(), 1);

  const auto b = step_log(o.out);
  expect_only_step_skipped(step_log(clean.out), b, states_clean, states, k);

  train::CompressOptions c = resume_job(dir);
  c.out = dir / "c.bitrank";
  c.hooks.after_backward = o.hooks.after_backward;
  expect_poisoned_run_resumes_the_same(c, be, b, o.out);
}

// A skip in block 0's last step halves the scale, and block 1 starts at
// that scale, not at the cap (the blocks' errors grow with depth, so a reset
// would cost block after block the same skips again). Resumed from the
// checkpoint at block 1's start, the run carries the same scale and ends
// bit-identical.
void scale_carries_into_the_next_block(Backend<float>& be, const fs::path& dir) {
  constexpr std::int64_t k = 11;  // resume_job: 12 steps a block
  train::CompressOptions o = resume_job(dir);
  o.hooks.after_backward = [&](train::StudentLlamaBlock<float>& block, std::int64_t step) {
    if (step != k) return;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    be.memory->upload(block.proj(model::LlamaProj::q).scale_grads().data + 3, &nan, sizeof nan);
  };
  train::compress(o, be);
  const auto b = step_log(o.out);
  ASSERT_EQ(b.size(), 24u);
  EXPECT_TRUE(b[k].skipped);
  for (std::size_t s = k + 1; s < b.size(); ++s) EXPECT_EQ(b[s].scale, b[0].scale / 2) << "step " << s;

  train::CompressOptions c = resume_job(dir);
  c.out = dir / "c.bitrank";
  c.hooks.after_backward = o.hooks.after_backward;
  expect_poisoned_run_resumes_the_same(c, be, b, o.out, 13, 12);  // from the checkpoint at block 1's start
}

// run(backend, a fresh folder) on every backend here (cpu; cuda on a GPU machine).
void on_every_backend(const std::function<void(Backend<float>&, const std::filesystem::path&)>& run) {
  for (const std::string& name : test::available_backends()) {
    SCOPED_TRACE(name);
    test::TempDir tmp;
    run(test::backend(name), tmp.path() / name);
  }
}

// On every backend here (cpu; cuda on a GPU machine): bit identity is per backend.
TEST(CompressResume, StoppedAnywhereResumesBitIdentically) {
  on_every_backend([](Backend<float>& be, const fs::path& dir) { stopped_anywhere_resumes_bit_identically(be, dir); });
}

// The sequential objective replays the trained student blocks on resume (block 1's inputs are block 0's
// student outputs): stopped anywhere, it resumes bit for bit too.
TEST(CompressResume, SequentialStoppedAnywhereResumesBitIdentically) {
  on_every_backend([](Backend<float>& be, const fs::path& dir) {
    stopped_anywhere_resumes_bit_identically(be, dir, "sequential");
  });
}

TEST(CompressResume, NanGradientSkipsThatStepOnly) {
  on_every_backend(nan_gradient_skips_that_step_only);
}

TEST(CompressResume, ScaleCarriesIntoTheNextBlock) { on_every_backend(scale_carries_into_the_next_block); }

// ---- the end-to-end objective's checkpoints and resume ----------------------------

// The tiny job with the e2e objective: 12 steps of 2 windows of 32, every
// block at once, a checkpoint after steps 5 and 10 and when done (12).
// stream: the student's and the teacher's blocks streamed from host memory
// (checkpoints download and upload the student through its two device
// slots), and the model has 3 blocks: every block then leaves its slot for
// host memory and comes back in the other one within a step (2 blocks would
// each keep a slot for good).
train::CompressOptions e2e_resume_job(const fs::path& dir, bool stream = false) {
  train::CompressOptions o = resume_job(dir);
  o.objective = "e2e";
  o.train.scales.lr = 1e-2f;  // the CLI's e2e default
  o.stream = stream ? "on" : "off";
  if (stream) {
    o.model = dir / "model3";
    if (!fs::exists(o.model)) {
      fs::create_directories(o.model);
      std::string config = kConfig;
      const std::string two = "\"num_hidden_layers\": 2";
      config.replace(config.find(two), two.size(), "\"num_hidden_layers\": 3");
      test::random_llama_dir(o.model, config, 3);
    }
  }
  return o;
}

// Records the whole e2e student's state after every step.
void record_e2e_states(train::CompressOptions& o, std::map<std::int64_t, std::uint64_t>& states) {
  o.hooks.e2e_after_step = [&states](const train::E2eTrainer<float>& trainer, const train::StepRecord& r) {
    states[r.step] = train::fnv1a64(trainer.download_state());
  };
}

void e2e_stopped_anywhere_resumes_bit_identically(Backend<float>& be, const fs::path& dir, bool stream) {
  std::map<std::int64_t, std::uint64_t> states_a, states_b;
  train::CompressOptions a = e2e_resume_job(dir, stream);
  const std::size_t L = stream ? 3 : 2;  // e2e_resume_job's blocks
  record_e2e_states(a, states_a);
  const auto summary_a = train::compress(a, be);
  EXPECT_EQ(summary_a.at("streaming").get<bool>(), stream);
  EXPECT_FALSE(fs::exists(train::compress_checkpoint_path(a.out)));
  ASSERT_EQ(states_a.size(), 12u);
  const auto log_a = step_log(a.out);
  ASSERT_EQ(log_a.size(), 12u);

  // B: stopped after steps 7, 9 and 11 (the last), resumed each time: from
  // the checkpoints after 5 and 10 steps (mid-run: the whole student's
  // state), then from the finished run's (straight to the save).
  train::CompressOptions b = e2e_resume_job(dir, stream);
  b.out = dir / "b.bitrank";
  const struct {
    std::int64_t stop_after, block, step;
  } stops[] = {{7, 0, 5}, {9, 0, 10}, {11, 1, 0}};
  for (const auto& stop : stops) {
    record_e2e_states(b, states_b);
    const auto record = b.hooks.e2e_after_step;
    b.hooks.e2e_after_step = [&](const train::E2eTrainer<float>& trainer, const train::StepRecord& r) {
      record(trainer, r);
      if (r.step == stop.stop_after) throw Stop{};
    };
    EXPECT_THROW(train::compress(b, be), Stop) << "stop after " << stop.stop_after;
    const train::CompressCheckpoint ck = train::read_compress_checkpoint(train::compress_checkpoint_path(b.out));
    EXPECT_EQ(ck.objective, "e2e");
    EXPECT_EQ(ck.block, stop.block);
    EXPECT_EQ(ck.trainer.step, stop.step);
    EXPECT_EQ(ck.student_state.empty(), stop.step == 0);
    EXPECT_EQ(ck.trained.size(), stop.block == 1 ? 7 * L : 0u);
    EXPECT_EQ(ck.trained_gains.size(), stop.block == 1 ? 2 * L + 1 : 0u) << "2 gains per block and the final norm's";
    EXPECT_EQ(step_log(b.out).size(), static_cast<std::size_t>(stop.stop_after + 1));
    b.resume = true;
  }
  b.hooks = {};
  record_e2e_states(b, states_b);
  const auto summary_b = train::compress(b, be);
  EXPECT_FALSE(fs::exists(train::compress_checkpoint_path(b.out)));
  EXPECT_EQ(summary_b.at("resumed_at_step").get<std::int64_t>(), 12);

  expect_same_steps(log_a, step_log(b.out));
  EXPECT_EQ(states_a, states_b) << "the whole student's state after every step";
  expect_same_tensors(a.out, b.out);
  EXPECT_EQ(summary_a.at("blocks"), summary_b.at("blocks"));
  EXPECT_GT(summary_a.at("training").at("sign_flips").get<std::int64_t>(), 0) << "signs must move for the test to bite";
  for (const char* k : {"ppl", "nll"})
    EXPECT_EQ(summary_a.at("perplexity").at("student").at(k), summary_b.at("perplexity").at("student").at(k)) << k;

  // The comparisons see the data: another seed (other windows, other SVD
  // starts) gives other losses, states and tensors.
  std::map<std::int64_t, std::uint64_t> states_c;
  train::CompressOptions c = e2e_resume_job(dir, stream);
  c.out = dir / "c.bitrank";
  c.seed = 1;
  record_e2e_states(c, states_c);
  train::compress(c, be);
  const auto log_c = step_log(c.out);
  ASSERT_EQ(log_c.size(), log_a.size());
  for (std::size_t s = 0; s < log_a.size(); ++s) {
    EXPECT_NE(log_a[s].loss, log_c[s].loss) << "step " << s;
    EXPECT_NE(states_a.at(static_cast<std::int64_t>(s)), states_c.at(static_cast<std::int64_t>(s))) << "step " << s;
  }
  EXPECT_NE(store::load_bitrank(a.out).blr.at("blk.1.ffn_down").paths[0].h,
            store::load_bitrank(c.out).blr.at("blk.1.ffn_down").paths[0].h);
}

TEST(CompressResume, E2eStoppedAnywhereResumesBitIdentically) {
  on_every_backend([](Backend<float>& be, const std::filesystem::path& dir) {
    e2e_stopped_anywhere_resumes_bit_identically(be, dir, false);
  });
}

// The same with --stream: the student's blocks live in host memory, their
// states go to and from the checkpoint through the device slots.
TEST(CompressResume, E2eStreamedStoppedAnywhereResumesBitIdentically) {
  on_every_backend([](Backend<float>& be, const std::filesystem::path& dir) {
    e2e_stopped_anywhere_resumes_bit_identically(be, dir, true);
  });
}

// A NaN poked into one gradient of the e2e student skips exactly that step:
// the whole student's state stays bit for bit, Adam's t does not advance,
// the grad scale halves; the steps before are the clean run's bit for bit.
// The skip survives a checkpoint and resume.
void e2e_nan_gradient_skips_that_step_only(Backend<float>& be, const fs::path& dir, bool stream) {
  std::map<std::int64_t, std::uint64_t> states_clean, states;
  train::CompressOptions clean = e2e_resume_job(dir, stream);
  clean.out = dir / "clean.bitrank";
  record_e2e_states(clean, states_clean);
  train::compress(clean, be);

  // Poison one scale gradient of block 1's ffn_up at step k; checkpoint after every step.
  constexpr std::int64_t k = 4;
  train::CompressOptions o = e2e_resume_job(dir, stream);
  o.checkpoint_every = 1;
  record_e2e_states(o, states);
  const auto record = o.hooks.e2e_after_step;
  std::vector<std::byte> before;
  bool checked = false;
  o.hooks.e2e_after_backward = [&](train::E2eTrainer<float>& trainer, std::int64_t step) {
    if (step != k) return;
    before = trainer.download_state();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    be.memory->upload(trainer.block(1).proj(model::LlamaProj::up).scale_grads().data + 7, &nan, sizeof nan);
  };
  o.hooks.e2e_after_step = [&](const train::E2eTrainer<float>& trainer, const train::StepRecord& r) {
    record(trainer, r);
    if (r.step != k) return;
    EXPECT_TRUE(trainer.download_state() == before) << "the skipped step changed the student's state";
    expect_checkpoint_after_skip(o.out, k);
    checked = true;
  };
  const auto summary = train::compress(o, be);
  EXPECT_TRUE(checked);
  EXPECT_EQ(summary.at("training").at("skipped_steps").get<std::int64_t>(), 1);

  const auto b = step_log(o.out);
  ASSERT_EQ(b.size(), 12u);
  expect_only_step_skipped(step_log(clean.out), b, states_clean, states, k);

  train::CompressOptions c = e2e_resume_job(dir, stream);
  c.out = dir / "c.bitrank";
  c.hooks.e2e_after_backward = o.hooks.e2e_after_backward;
  expect_poisoned_run_resumes_the_same(c, be, b, o.out);
}

TEST(CompressResume, E2eNanGradientSkipsThatStepOnly) {
  on_every_backend([](Backend<float>& be, const std::filesystem::path& dir) {
    e2e_nan_gradient_skips_that_step_only(be, dir, false);
  });
}

// The same with --stream: the poisoned gradient is written into block 1 in
// its slot (trainer.block), and the step's sums of squares see it.
TEST(CompressResume, E2eStreamedNanGradientSkipsThatStepOnly) {
  on_every_backend([](Backend<float>& be, const std::filesystem::path& dir) {
    e2e_nan_gradient_skips_that_step_only(be, dir, true);
  });
}

// A checkpoint records its objective: a resume with the other one is an
// Error naming both, before any work.
TEST(CompressResume, ResumeWithTheOtherObjectiveIsAnError) {
  test::TempDir tmp;
  Backend<float>& be = test::cpu_backend();
  for (const char* objective : {"layer", "e2e"}) {
    train::CompressOptions o = objective == std::string("e2e") ? e2e_resume_job(tmp.path()) : resume_job(tmp.path());
    o.out = tmp.path() / (std::string(objective) + ".bitrank");
    o.hooks.on_step = [](const train::StepRecord& r) {
      if (r.step == 6) throw Stop{};
    };
    EXPECT_THROW(train::compress(o, be), Stop);
    EXPECT_EQ(train::read_compress_checkpoint(train::compress_checkpoint_path(o.out)).objective, objective);
    o.hooks = {};
    o.resume = true;
    o.objective = objective == std::string("e2e") ? "layer" : "e2e";
    test::expect_error([&] { train::compress(o, be); },
                       fmt::format("is the checkpoint of a run with the {} objective, this run's is {}", objective,
                                   o.objective));
  }
}

// Checkpoint versions: version 1 (before e2e checkpoints: no "objective")
// reads as a layer-wise run's; an unknown version or objective, or an e2e
// checkpoint past its one block, is an Error naming the file.
TEST(CompressResume, CheckpointVersionsAndObjectives) {
  test::TempDir tmp;
  train::CompressCheckpoint c;
  c.objective = "e2e";
  c.block = 0;
  c.trainer.step = 3;
  c.trainer.applied_steps = 3;
  c.trainer.data = train::DataPosition{.seed = 0, .epoch = 0, .index = 6, .seq_len = 32, .windows_per_step = 2,
                                       .windows = 40, .fingerprint = 0x1234};
  c.trainer.schedule = train::LrScheduleOptions{.peak = 1, .warmup_steps = 1, .total_steps = 12, .floor_fraction = 0.1};
  c.options = {{"objective", "e2e"}};
  c.blocks = {train::CompressBlockLog{{1.5, 1.25, 1.125}, 7, 0}};
  c.perplexity = {{"teacher", 1.0}};
  c.trained_gains["output_norm.weight"] = {1.f, 2.f};
  c.student_state = {std::byte{1}, std::byte{2}, std::byte{3}};
  const fs::path path = tmp.path() / "x.ckpt";
  train::write_compress_checkpoint(path, c);
  const train::CompressCheckpoint r = train::read_compress_checkpoint(path);
  EXPECT_EQ(r.objective, "e2e");
  EXPECT_EQ(r.trainer, c.trainer);
  EXPECT_EQ(r.blocks, c.blocks);
  EXPECT_EQ(r.trained_gains, c.trained_gains);
  EXPECT_EQ(r.student_state, c.student_state);

  // The same file with its metadata edited: `edit` changes the version and the compress JSON.
  const auto rewrite = [&](const fs::path& to, auto edit) {
    const io::Safetensors st = io::Safetensors::open(path);
    std::map<std::string, std::string> meta = st.metadata();
    auto j = nlohmann::json::parse(meta.at("bitrank.compress"));
    edit(meta.at("bitrank.version"), j);
    meta.at("bitrank.compress") = j.dump();
    std::vector<io::StTensorOut> tensors;
    for (const io::TensorInfo& t : st.tensors())
      tensors.push_back(io::StTensorOut::raw(t.name, t.dtype, t.shape, st.bytes(t.name)));
    io::write_safetensors(to, tensors, meta);
  };
  const fs::path v1 = tmp.path() / "v1.ckpt";
  rewrite(v1, [](std::string& version, nlohmann::json& j) {
    EXPECT_EQ(version, "2");
    version = "1";
    j.erase("objective");
  });
  EXPECT_EQ(train::read_compress_checkpoint(v1).objective, "layer");
  EXPECT_EQ(train::read_compress_checkpoint(v1).blocks, c.blocks);

  const fs::path bad = tmp.path() / "bad.ckpt";
  rewrite(bad, [](std::string& version, nlohmann::json&) { version = "3"; });
  test::expect_error([&] { train::read_compress_checkpoint(bad); },
                     bad.string() + ": checkpoint version 3; this build reads versions 1 to 2");
  rewrite(bad, [](std::string&, nlohmann::json& j) { j.erase("objective"); });
  test::expect_error([&] { train::read_compress_checkpoint(bad); }, "objective");
  rewrite(bad, [](std::string&, nlohmann::json& j) { j["objective"] = "kd"; });
  test::expect_error([&] { train::read_compress_checkpoint(bad); }, "objective \"kd\" is not one of layer, sequential, e2e");
  rewrite(bad, [](std::string&, nlohmann::json& j) { j["block"] = 2; });
  test::expect_error([&] { train::read_compress_checkpoint(bad); }, "block 2 with 1 block logs is inconsistent (e2e");
}

// ---- the CLI, killed with SIGKILL and resumed -------------------------------------

// Starts `argv` with stdout and stderr to `log`; returns its pid.
pid_t spawn(const std::vector<std::string>& argv, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

int wait_exit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::size_t lines_in(const fs::path& p) {
  std::ifstream in(p);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(CompressResume, CliKilledMidRunResumesBitIdentically) {
  test::TempDir tmp;
  const train::CompressOptions o = resume_job(tmp.path());  // writes the model and texts
  const auto args = [&](const std::string& out) {
    return std::vector<std::string>{BITRANK_CLI, "compress", "--model", o.model.string(), "--text", o.texts.front().string(),
                                    "--eval-text", o.eval_text.string(), "--eval-windows", "1", "--eval-seq-len",
                                    "64", "--bpw", "4", "--steps", "40", "--seq-len", "32", "--windows", "2",
                                    "--sign-lr", "0.02", "--checkpoint-every", "3", "-o", (tmp.path() / out).string()};
  };
  const fs::path killed = tmp.path() / "killed.bitrank", whole = tmp.path() / "whole.bitrank";
  const fs::path ckpt = train::compress_checkpoint_path(killed), log = killed.string() + ".steps.jsonl";

  // Kill once 12 of the 80 steps are logged (checkpoints at steps 3, 6, 9, ...).
  const pid_t pid = spawn(args("killed.bitrank"), tmp.path() / "killed.out");
  ASSERT_GT(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool exited = false;
  while (!(fs::exists(ckpt) && lines_in(log) >= 12)) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << read_text(tmp.path() / "killed.out");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(exited) << "the CLI ended before it could be killed:\n" << read_text(tmp.path() / "killed.out");
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_FALSE(fs::exists(killed)) << "killed before the model was saved";
  const train::CompressCheckpoint ck = train::read_compress_checkpoint(ckpt);
  const std::int64_t at = ck.block * 40 + ck.trainer.step;
  EXPECT_GE(at, 9);
  EXPECT_LT(at, 80);

  std::vector<std::string> resume = args("killed.bitrank");
  resume.push_back("--resume");
  ASSERT_EQ(wait_exit(spawn(resume, tmp.path() / "resumed.out")), 0) << read_text(tmp.path() / "resumed.out");
  ASSERT_EQ(wait_exit(spawn(args("whole.bitrank"), tmp.path() / "whole.out")), 0) << read_text(tmp.path() / "whole.out");
  EXPECT_NE(read_text(tmp.path() / "resumed.out").find("\"resumed_at_step\": " + std::to_string(at)), std::string::npos);
  EXPECT_FALSE(fs::exists(ckpt));

  expect_same_steps(step_log(whole), step_log(killed));
  expect_same_tensors(whole, killed);
  std::printf("  [compress] CLI killed after 12+ steps, resumed from its checkpoint at step %lld\n",
              static_cast<long long>(at));
}

// A hybrid run stopped mid-block (after a checkpoint there) and resumed
// gives the uninterrupted run's losses and tensors bit for bit: the hybrid
// student's state round-trips through the checkpoint.
TEST(CompressResume, HybridStoppedMidBlockResumesBitIdentically) {
  test::TempDir tmp;
  Backend<float>& be = test::cpu_backend();
  train::CompressOptions whole = tiny_hybrid_options(tmp.path());
  whole.out = tmp.path() / "whole.bitrank";
  whole.checkpoint_every = 4;
  train::compress(whole, be);

  // Checkpoints after steps 3, 5 (block end), 7, 11, ...: stop after step 9, resume at block 1, step 2.
  train::CompressOptions o = whole;
  o.out = tmp.path() / "stopped.bitrank";
  struct Stop {};
  o.hooks.on_step = [](const train::StepRecord& r) {
    if (r.step == 9) throw Stop{};
  };
  EXPECT_THROW(train::compress(o, be), Stop);
  const train::CompressCheckpoint ck = train::read_compress_checkpoint(train::compress_checkpoint_path(o.out));
  EXPECT_EQ(ck.block, 1);
  EXPECT_EQ(ck.trainer.step, 2);
  EXPECT_FALSE(ck.student_state.empty());
  o.hooks = {};
  o.resume = true;
  const auto summary = train::compress(o, be);
  EXPECT_EQ(summary.at("resumed_at_step").get<std::int64_t>(), 8);
  expect_same_steps(step_log(whole.out), step_log(o.out));
  expect_same_tensors(whole.out, o.out);
}

// The same for the end-to-end objective on a hybrid: stopped mid-run (after
// a checkpoint of the whole student) and resumed, on every backend here —
// resident, and streamed (--stream) against the resident run.
TEST(CompressResume, HybridE2eStoppedMidRunResumesBitIdentically) {
  for (const std::string& name : test::available_backends()) {
    SCOPED_TRACE(name);
    Backend<float>& be = test::backend(name);
    test::TempDir tmp;
    train::CompressOptions whole = tiny_hybrid_options(tmp.path());
    whole.objective = "e2e";
    whole.steps = 10;
    whole.train.scales.lr = 1e-2f;
    whole.out = tmp.path() / "whole.bitrank";
    whole.checkpoint_every = 4;
    const auto summary_whole = train::compress(whole, be);
    const auto log_whole = step_log(whole.out);
    ASSERT_EQ(log_whole.size(), 10u);
    EXPECT_GT(summary_whole.at("training").at("sign_flips").get<std::int64_t>(), 0)
        << "signs must move for the test to bite";

    // Checkpoints after steps 4 and 8: stop after step 6 (0-based), resume at step 4.
    train::CompressOptions o = whole;
    o.out = tmp.path() / "stopped.bitrank";
    o.hooks.on_step = [](const train::StepRecord& r) {
      if (r.step == 6) throw Stop{};
    };
    EXPECT_THROW(train::compress(o, be), Stop);
    const train::CompressCheckpoint ck = train::read_compress_checkpoint(train::compress_checkpoint_path(o.out));
    EXPECT_EQ(ck.objective, "e2e");
    EXPECT_EQ(ck.block, 0);
    EXPECT_EQ(ck.trainer.step, 4);
    EXPECT_FALSE(ck.student_state.empty());
    o.hooks = {};
    o.resume = true;
    const auto summary = train::compress(o, be);
    EXPECT_EQ(summary.at("resumed_at_step").get<std::int64_t>(), 4);
    expect_same_steps(log_whole, step_log(o.out));
    expect_same_tensors(whole.out, o.out);

    // Streamed (student and teacher blocks from host memory), stopped and
    // resumed the same way: the resident uninterrupted run's log and tensors.
    train::CompressOptions streamed = whole;
    streamed.out = tmp.path() / "streamed.bitrank";
    streamed.stream = "on";
    streamed.hooks.on_step = [](const train::StepRecord& r) {
      if (r.step == 6) throw Stop{};
    };
    EXPECT_THROW(train::compress(streamed, be), Stop);
    streamed.hooks = {};
    streamed.resume = true;
    const auto summary_streamed = train::compress(streamed, be);
    EXPECT_TRUE(summary_streamed.at("streaming").get<bool>());
    EXPECT_EQ(summary_streamed.at("resumed_at_step").get<std::int64_t>(), 4);
    expect_same_steps(log_whole, step_log(streamed.out));
    expect_same_tensors(whole.out, streamed.out);

    // The comparison sees the data: another seed gives other losses and tensors.
    train::CompressOptions other = whole;
    other.out = tmp.path() / "other.bitrank";
    other.seed = 1;
    train::compress(other, be);
    const auto log_other = step_log(other.out);
    ASSERT_EQ(log_other.size(), log_whole.size());
    for (std::size_t s = 0; s < log_whole.size(); ++s) EXPECT_NE(log_whole[s].loss, log_other[s].loss) << "step " << s;
    EXPECT_NE(store::load_bitrank(whole.out).blr.at("blk.3.attn_q").paths[0].h,
              store::load_bitrank(other.out).blr.at("blk.3.attn_q").paths[0].h);
  }
}

// Mean KL(teacher ‖ model) per token over the first 2 windows of 64 of the
// evaluation text: how far a compressed model's next-token distributions are
// from its teacher's. (On a random-weight teacher this, not perplexity, says
// whether a student got closer: the teacher's own perplexity is near the
// vocabulary's size.)
double kl_to_teacher(Backend<float>& be, const train::CompressOptions& o, const fs::path& student_file) {
  const store::LoadedWeights teacher_w = store::load_any(o.model), student_w = store::load_any(student_file);
  const auto teacher = model::make_model(be, teacher_w.weights, teacher_w.blr);
  const auto student = model::make_model(be, student_w.weights, student_w.blr);
  std::ifstream in(o.eval_text);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto ids = io::load_model_tokenizer(o.model).encode(text);
  const auto span = std::span<const std::int32_t>(ids).first(2 * 64);
  const std::vector<double> lt = teacher->logits(span, 64), ls = student->logits(span, 64);
  const std::size_t V = static_cast<std::size_t>(teacher_w.weights.config.vocab_size), n = span.size();
  double kl = 0;
  for (std::size_t t = 0; t < n; ++t) {
    const auto log_softmax = [&](const std::vector<double>& l) {
      double mx = -1e300, sum = 0;
      for (std::size_t v = 0; v < V; ++v) mx = std::max(mx, l[t * V + v]);
      for (std::size_t v = 0; v < V; ++v) sum += std::exp(l[t * V + v] - mx);
      std::vector<double> out(V);
      for (std::size_t v = 0; v < V; ++v) out[v] = l[t * V + v] - mx - std::log(sum);
      return out;
    };
    const auto p = log_softmax(lt), q = log_softmax(ls);
    for (std::size_t v = 0; v < V; ++v) kl += std::exp(p[v]) * (p[v] - q[v]);
  }
  return kl / static_cast<double>(n);
}

// The sequential objective trains block 0 as the layer-wise one does (the
// same inputs: the embeddings) and block 1 from the student's block-0
// outputs: block 1's losses differ. And the post-training recipe —
// activation-weighted init, then sequential block reconstruction — ends
// closer to the teacher (KL per token on evaluation windows) than the plain
// Dual-SVID start at the same seed (saved after one step at rate 0), on
// every backend here.
TEST(Compress, SequentialTrainsFromTheStudentsInputs) {
  on_every_backend([](Backend<float>& be, const fs::path& dir) {
    fs::create_directories(dir);
    train::CompressOptions layer = tiny_options(dir, "layer.bitrank");
    layer.init_method = "svid";
    layer.train.scales.lr = 1e-2f;
    train::CompressOptions seq = layer;
    seq.objective = "sequential";
    seq.out = dir / "seq.bitrank";
    train::compress(layer, be);
    train::compress(seq, be);
    const auto la = step_log(layer.out), lb = step_log(seq.out);
    ASSERT_EQ(la.size(), 48u);
    ASSERT_EQ(lb.size(), 48u);
    for (std::size_t s = 0; s < 24; ++s) EXPECT_EQ(la[s].loss, lb[s].loss) << "block 0, step " << s;
    EXPECT_NE(la[24].loss, lb[24].loss) << "block 1 reads other inputs";

    train::CompressOptions start = layer;  // the Dual-SVID start, as saved
    start.steps = 1;
    start.train.scales.lr = 0;
    start.train.gains.lr = 0;
    start.train.signs.lr = 0;
    start.out = dir / "start.bitrank";
    train::compress(start, be);
    train::CompressOptions ptq = seq;
    ptq.init_method = "act";
    ptq.out = dir / "ptq.bitrank";
    train::compress(ptq, be);
    const double kl_start = kl_to_teacher(be, ptq, start.out), kl_layer = kl_to_teacher(be, ptq, layer.out),
                 kl_seq = kl_to_teacher(be, ptq, seq.out), kl_ptq = kl_to_teacher(be, ptq, ptq.out);
    std::printf("[compress] tiny llama, KL(teacher || student) per token: Dual-SVID start %.4f, layer %.4f, "
                "sequential %.4f, act init + sequential %.4f\n",
                kl_start, kl_layer, kl_seq, kl_ptq);
    EXPECT_LT(kl_ptq, kl_start);
    EXPECT_LT(kl_seq, kl_start);
  });
}

// The calibration statistics with Grams: one Gram per distinct input (q, k,
// v share one; gate, up another), symmetric, and its diagonal less the
// damping is the squared rms of the same rows; then the Gram-refined init
// (init method gram) compresses end to end and reports each matrix's output
// error under its Gram, below 1.
TEST(Compress, InputGramsAndTheGramRefinedInit) {
  test::TempDir tmp;
  const train::CompressOptions base = tiny_options(tmp.path(), "gram.bitrank");
  Backend<float>& be = test::cpu_backend();
  const auto teacher = store::load_model(be, base.model);
  std::vector<std::int32_t> ids(4 * 32);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + 3) % 50);
  const train::ProjectionInputs in = train::projection_inputs(*teacher, ids, 32, true);
  ASSERT_EQ(in.gram.size(), in.rms.size());
  EXPECT_EQ(in.gram.at("blk.0.attn_q").get(), in.gram.at("blk.0.attn_v").get());
  EXPECT_EQ(in.gram.at("blk.1.ffn_gate").get(), in.gram.at("blk.1.ffn_up").get());
  EXPECT_NE(in.gram.at("blk.0.attn_q").get(), in.gram.at("blk.0.attn_output").get());
  for (const auto& [name, gram] : in.gram) {
    const std::vector<float>& rms = in.rms.at(name);
    const auto n = rms.size();
    ASSERT_EQ(gram->size(), n * n) << name;
    double trace = 0, mean_sq = 0;
    for (std::size_t j = 0; j < n; ++j) mean_sq += double(rms[j]) * rms[j];
    for (std::size_t j = 0; j < n; ++j) trace += (*gram)[j * n + j];
    // trace = (1 + n·λ/n)·Σ rms² with λ a fraction of the mean diagonal: Σ rms² (1 + kGramDamping).
    EXPECT_NEAR(trace, mean_sq * (1 + train::kGramDamping), 1e-4 * trace) << name;
    const double ridge = train::kGramDamping * mean_sq / double(n);
    for (std::size_t j = 0; j < n; ++j) {
      EXPECT_NEAR((*gram)[j * n + j] - ridge, double(rms[j]) * rms[j], 1e-4 * (*gram)[j * n + j] + 1e-9) << name << " " << j;
      for (std::size_t t = 0; t < j; ++t) EXPECT_EQ((*gram)[j * n + t], (*gram)[t * n + j]) << name;
    }
  }

  train::CompressOptions o = base;
  o.init_method = "gram";
  o.init_refine = 2;
  o.steps = 2;
  const auto summary = train::compress(o, be);
  EXPECT_EQ(summary.at("init_method"), "gram");
  for (const auto& [name, m] : summary.at("matrices").items()) {
    const double e = m.at("init_output_error").get<double>();
    EXPECT_TRUE(e > 0 && e < 1) << name << ": " << e;
  }
  o.init_refine = 0;
  test::expect_error([&] { train::compress(o, be); }, "with --init-refine 0 there is nothing to refine");
}

// compress_recipe: the block-wise stage, then e2e_steps end-to-end steps
// from its result; stopped inside the end-to-end stage and resumed, the
// result equals the uninterrupted run's bit for bit; the intermediate file
// is gone at the end.
TEST(Compress, RecipeBlockwiseThenEndToEndResumes) {
  on_every_backend([](Backend<float>& be, const fs::path& dir) {
    fs::create_directories(dir);
    train::CompressOptions a = tiny_options(dir, "a.bitrank");
    a.objective = "sequential";
    a.steps = 6;
    a.e2e_steps = 6;
    a.init_refine = 1;  // the block-wise stage's start only: the e2e stage starts from its file
    a.checkpoint_every = 2;
    const auto sa = train::compress_recipe(a, be);
    EXPECT_EQ(sa.at("objective"), "e2e");
    ASSERT_EQ(sa.at("stages").size(), 1u);
    EXPECT_EQ(sa.at("stages")[0].at("objective"), "sequential");
    EXPECT_TRUE(sa.at("perplexity").contains("blockwise"));
    EXPECT_TRUE(sa.at("perplexity").at("init").at("ppl").get<double>() > 0);  // the block-wise stage's start
    EXPECT_FALSE(fs::exists(a.out.string() + ".blockwise.bitrank"));
    EXPECT_EQ(step_log(a.out).size(), 6u);

    train::CompressOptions b = a;
    b.out = dir / "b.bitrank";
    int steps = 0;
    b.hooks.on_step = [&](const train::StepRecord&) {
      if (++steps == 2 * 6 + 3) throw Stop{};  // the end-to-end stage's step 3
    };
    EXPECT_THROW(train::compress_recipe(b, be), Stop);
    EXPECT_TRUE(fs::exists(b.out.string() + ".blockwise.bitrank"));
    b.hooks = {};
    b.resume = true;
    const auto sb = train::compress_recipe(b, be);
    EXPECT_EQ(sb.at("resumed_at_step").get<std::int64_t>(), 2);
    expect_same_steps(step_log(a.out), step_log(b.out));
    expect_same_tensors(a.out, b.out);
    EXPECT_EQ(sa.at("perplexity").at("blockwise").at("ppl"), sb.at("perplexity").at("blockwise").at("ppl"));

    // Without eval_init the start is not measured: null in the summary.
    train::CompressOptions c = a;
    c.out = dir / "c.bitrank";
    c.e2e_steps = 0;
    c.eval_init = false;
    const auto sc = train::compress_recipe(c, be);
    EXPECT_TRUE(sc.at("perplexity").at("init").is_null());
    EXPECT_TRUE(sc.at("perplexity").at("student").at("ppl").get<double>() > 0);
  });
}

// The recipe defaults (train::apply_recipe_defaults), the one place they are
// set: by device and method, and never over an option the user gave.
TEST(Compress, RecipeDefaults) {
  train::CompressOptions cpu;
  train::apply_recipe_defaults(cpu, "train", {});
  EXPECT_EQ(cpu.objective, "sequential");
  EXPECT_EQ(cpu.init_method, "gram");
  EXPECT_EQ(cpu.seq_len, 256);
  EXPECT_EQ(cpu.windows_per_step, 4);
  EXPECT_EQ(cpu.steps, 30);
  EXPECT_EQ(cpu.e2e_steps, 0);
  EXPECT_EQ(cpu.max_text_tokens, 0);
  EXPECT_FLOAT_EQ(cpu.train.scales.lr, 1e-2f);
  EXPECT_FLOAT_EQ(cpu.train.signs.lr, 1e-2f);
  EXPECT_EQ(cpu.allocation, "front");
  EXPECT_EQ(cpu.init_refine, 8);
  EXPECT_EQ(cpu.calib_windows, 64);
  EXPECT_FALSE(cpu.eval_init);
  EXPECT_EQ(cpu.init_rotate, 12);
  train::CompressOptions cpu_low;  // below 1.0 bpw the cpu plans uniform (measured at 0.55)
  cpu_low.bpw = 0.55;
  train::apply_recipe_defaults(cpu_low, "train", {});
  EXPECT_EQ(cpu_low.allocation, "uniform");
  train::CompressOptions cpu_unrefined;  // no sweeps: nothing to weigh by the Gram
  cpu_unrefined.init_refine = 0;
  train::apply_recipe_defaults(cpu_unrefined, "train", {.init_refine = true});
  EXPECT_EQ(cpu_unrefined.init_method, "act");

  train::CompressOptions cuda;
  cuda.device = "cuda";
  train::apply_recipe_defaults(cuda, "train", {});
  EXPECT_EQ(cuda.seq_len, 512);
  EXPECT_EQ(cuda.windows_per_step, 8);
  EXPECT_EQ(cuda.steps, 1000);
  EXPECT_EQ(cuda.e2e_steps, 600);
  EXPECT_EQ(cuda.calib_windows, 64);
  EXPECT_TRUE(cuda.eval_init);
  EXPECT_EQ(cuda.init_rotate, 12);
  EXPECT_EQ(cuda.allocation, "uniform");
  EXPECT_EQ(cuda.init_refine, 8);
  EXPECT_EQ(cuda.init_method, "act");
  train::CompressOptions from_file;  // --init: the file's matrices, nothing to refine
  from_file.model = "teacher.gguf";  // validate reads no file before this check
  from_file.out = "out.bitrank";
  from_file.init = "start.bitrank";
  train::apply_recipe_defaults(from_file, "train", {});
  EXPECT_EQ(from_file.init_refine, 0);
  EXPECT_EQ(from_file.init_rotate, 0);
  EXPECT_EQ(from_file.init_method, "act");
  from_file.init_refine = 2;
  test::expect_error([&] { train::validate(from_file); }, "--init-refine refines the Dual-SVID start");

  train::CompressOptions ptq;
  ptq.device = "cuda";
  train::apply_recipe_defaults(ptq, "ptq", {});
  EXPECT_EQ(ptq.objective, "sequential");
  EXPECT_EQ(ptq.max_text_tokens, 262144);
  EXPECT_EQ(ptq.steps, 1000);
  EXPECT_EQ(ptq.e2e_steps, 600);  // over the calibration set too

  train::CompressOptions e2e;
  e2e.objective = "e2e";
  train::apply_recipe_defaults(e2e, "train", {.objective = true});
  EXPECT_EQ(e2e.objective, "e2e");
  EXPECT_FLOAT_EQ(e2e.train.signs.lr, 1e-4f);
  EXPECT_EQ(e2e.e2e_steps, 0);

  train::CompressOptions given;
  given.device = "cuda";
  given.seq_len = 64;
  given.steps = 3;
  given.train.signs.lr = 5e-3f;
  given.init_method = "svid";
  given.eval_init = false;
  train::apply_recipe_defaults(
      given, "train", {.init_method = true, .seq_len = true, .steps = true, .sign_lr = true, .eval_init = true});
  EXPECT_EQ(given.seq_len, 64);
  EXPECT_EQ(given.steps, 3);
  EXPECT_FLOAT_EQ(given.train.signs.lr, 5e-3f);
  EXPECT_EQ(given.init_method, "svid");
  EXPECT_EQ(given.windows_per_step, 8);
  EXPECT_FALSE(given.eval_init);

  train::CompressOptions bad;
  test::expect_error([&] { train::apply_recipe_defaults(bad, "qat", {}); }, "method 'qat' is not one of train, ptq");
}

// The "front" allocation on SmolLM2-135M's projections (30 blocks): blocks 0
// and 1 planned at twice the target, the others lower, the whole within the
// target and close to it; at a target whose double the first blocks cannot
// use, their cap; per-projection targets replace it.
TEST(Compress, FrontAllocation) {
  std::vector<blr::RankPlan> proj;
  const std::vector<std::tuple<std::string, index_t, index_t>> shapes{
      {"attn_q", 576, 576}, {"attn_k", 192, 576},   {"attn_v", 192, 576},  {"attn_output", 576, 576},
      {"ffn_gate", 1536, 576}, {"ffn_up", 1536, 576}, {"ffn_down", 576, 1536}};
  for (int b = 0; b < 30; ++b)
    for (const auto& [name, m, n] : shapes) proj.push_back({fmt::format("blk.{}.{}", b, name), m, n, 0});
  const auto bits_of = [](const std::vector<blr::RankPlan>& plan, std::string_view block) {
    std::int64_t bits = 0, weights = 0;
    for (const blr::RankPlan& p : plan)
      if (block.empty() || p.name.starts_with(block)) {
        bits += blr::blr_bits(p.m, p.n, p.rank, 2, 16);
        weights += p.m * p.n;
      }
    return static_cast<double>(bits) / static_cast<double>(weights);
  };
  train::CompressOptions o;
  o.bpw = 1.0;
  o.allocation = "front";
  const auto front = train::plan_ranks_for(o, proj);
  o.allocation = "uniform";
  const auto uniform = train::plan_ranks_for(o, proj);
  EXPECT_GT(bits_of(front, "blk.0."), 1.9);
  EXPECT_LE(bits_of(front, "blk.0."), 2.0);
  EXPECT_GT(bits_of(front, "blk.1."), 1.9);
  std::vector<blr::RankPlan> others;
  for (const blr::RankPlan& e : front)
    if (!e.name.starts_with("blk.0.") && !e.name.starts_with("blk.1.")) others.push_back(e);
  EXPECT_LT(bits_of(others, ""), 0.95);  // the others pay
  EXPECT_LE(bits_of(front, ""), 1.0);
  EXPECT_GT(bits_of(front, ""), 0.995);
  EXPECT_NEAR(bits_of(uniform, "blk.0."), bits_of(uniform, "blk.2."), 1e-9);

  o.allocation = "front";
  o.bpw = 2.0;  // twice is past what blocks 0 and 1 can use (3.10 bpw): their cap
  const auto capped = train::plan_ranks_for(o, proj);
  EXPECT_GT(bits_of(capped, "blk.0."), 3.0);
  EXPECT_LE(bits_of(capped, ""), 2.0);

  o.bpw = 0.29;  // just above the smallest reachable 0.2781: the others keep rank 32
  const auto low = train::plan_ranks_for(o, proj);
  EXPECT_GT(bits_of(low, "blk.0."), 0.29);
  EXPECT_LE(bits_of(low, ""), 0.29);

  o.bpw = 1.0;
  o.bpw_overrides = {{"attn_v", 2.0}};  // given targets replace the allocation
  const auto given = train::plan_ranks_for(o, proj), direct = blr::plan_ranks(proj, 1.0, o.bpw_overrides, 2, 16);
  for (std::size_t i = 0; i < proj.size(); ++i) EXPECT_EQ(given[i].rank, direct[i].rank) << proj[i].name;
}

}  // namespace
}  // namespace bitrank
